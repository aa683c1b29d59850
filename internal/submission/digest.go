package submission

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxSubmissionBytes bounds what is read from a submission file. A submission is a few
// kilobytes of settings; a larger file is a wrong path, not a submission.
const MaxSubmissionBytes = 16 << 20

// ReadFile reads a submission file, refusing one larger than MaxSubmissionBytes.
func ReadFile(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(io.LimitReader(f, MaxSubmissionBytes+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if len(raw) > MaxSubmissionBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes; a submission is a small JSON document", file, MaxSubmissionBytes)
	}
	return raw, nil
}

// Digest is the sha256 hex of the canonical JSON of a submission document, the value
// the data source publishes as `digest`.
func Digest(raw []byte) (string, error) {
	v, err := Parse(raw)
	if err != nil {
		return "", withIn(err, InSubmission)
	}
	return DigestOf(v)
}

// ReadAndDigest reads a submission file and returns its digest. A resource that was
// given `submission_digest` and `submission_file` calls it at apply (through
// CheckUnchanged) to refuse a submission that is not the one the plan was made from.
func ReadAndDigest(file string) (string, error) {
	raw, err := ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read submission file: %w", err)
	}
	d, err := Digest(raw)
	if err != nil {
		return "", fmt.Errorf("submission file %s: %w", file, err)
	}
	return d, nil
}

// DigestMismatchError says that the submission file changed between the plan and the
// apply. It shows both digests.
type DigestMismatchError struct {
	File      string
	Evaluated string // the digest the plan was made with (submission_digest)
	Current   string // the digest of the file now
}

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("the submission %s is not the one this run was planned with: planned with digest %s, "+
		"the file now has digest %s. Nothing was deployed. Run plan again to deploy the current submission, "+
		"or restore the submission that was planned", e.File, e.Evaluated, e.Current)
}

// CheckUnchanged re-reads the submission file and returns a *DigestMismatchError when its
// digest is not the evaluated one.
func CheckUnchanged(file, evaluated string) error {
	cur, err := ReadAndDigest(file)
	if err != nil {
		return err
	}
	if cur != evaluated {
		return &DigestMismatchError{File: file, Evaluated: evaluated, Current: cur}
	}
	return nil
}

// IsDigestMismatch tells whether err is (or wraps) a *DigestMismatchError.
func IsDigestMismatch(err error) bool {
	var m *DigestMismatchError
	return errors.As(err, &m)
}
