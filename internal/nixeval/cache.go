package nixeval

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// EvalCache remembers which store path a node's evaluation produced (a toplevel, or
// the .drv of a plan-time evaluation), keyed on the node plan digest and the build
// inputs alone, in a directory of small JSON files.
// It is never a source of truth: Lookup ignores an entry whose path the store does
// not hold (StoreHas), and a failed Store is reported as a warning only (by the
// Evaluator, and by the deploy body, whose Options.Cache it can be).
type EvalCache struct {
	// Dir holds one <key>.json file per entry. It is created on first Store.
	Dir string
	// StoreHas reports whether the local store holds a path. Nil means "ask the file
	// system" (os.Stat), which is right when the store is the deployer's /nix/store.
	StoreHas func(storePath string) bool
}

type cacheEntry struct {
	Key      string    `json:"key"`
	Toplevel string    `json:"toplevel"`
	Written  time.Time `json:"written"`
}

// MakeCacheKey derives the cache key from the node plan digest and the build inputs
// (e.g. the flake or source revision, the system attribute). Per-run values such as
// credential locations must not be passed: they are not part of what is built.
func MakeCacheKey(planDigest string, buildInputs map[string]string) string {
	canonical, _ := json.Marshal(struct {
		PlanDigest  string            `json:"plan_digest"`
		BuildInputs map[string]string `json:"build_inputs"`
	}{planDigest, buildInputs}) // encoding/json sorts map keys
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

var cacheKeyPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (c *EvalCache) file(key string) (string, error) {
	if !cacheKeyPattern.MatchString(key) {
		return "", fmt.Errorf("cache key %q is not a MakeCacheKey key", key)
	}
	return filepath.Join(c.Dir, key+".json"), nil
}

// Lookup returns the cached toplevel for key. ok is false when there is no usable
// entry; why says what was wrong with an entry that exists but was ignored.
func (c *EvalCache) Lookup(key string) (toplevel string, ok bool, why string) {
	file, err := c.file(key)
	if err != nil {
		return "", false, err.Error()
	}
	data, err := os.ReadFile(file)
	if err != nil {
		if os.IsNotExist(err) {
			return "", false, ""
		}
		return "", false, fmt.Sprintf("cache entry %s unreadable: %v", file, err)
	}
	var entry cacheEntry
	if err := json.Unmarshal(data, &entry); err != nil || entry.Key != key || !nixstore.CleanAbsolutePath(entry.Toplevel) {
		return "", false, fmt.Sprintf("cache entry %s is malformed; ignored", file)
	}
	if !c.storeHas(entry.Toplevel) {
		return "", false, fmt.Sprintf("cache entry %s names %s, which the store does not hold; ignored", file, entry.Toplevel)
	}
	return entry.Toplevel, true, ""
}

// Store records key → toplevel. The write goes to a temporary file renamed into
// place, so a reader never sees half an entry.
func (c *EvalCache) Store(key, toplevel string, now time.Time) error {
	file, err := c.file(key)
	if err != nil {
		return err
	}
	data, err := json.Marshal(cacheEntry{Key: key, Toplevel: toplevel, Written: now.UTC()})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("creating evaluation cache %s: %w", c.Dir, err)
	}
	tmp, err := os.CreateTemp(c.Dir, ".entry-*")
	if err != nil {
		return fmt.Errorf("writing evaluation cache %s: %w", c.Dir, err)
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), file)
	}
	if err != nil {
		// The entry was not written; the temporary file is ours to clean up, and a
		// failure to remove it adds nothing to the error the caller gets.
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing evaluation cache entry %s: %w", file, err)
	}
	return nil
}

// Forget removes the entry of key, if there is one.
func (c *EvalCache) Forget(key string) error {
	file, err := c.file(key)
	if err != nil {
		return err
	}
	if err := os.Remove(file); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

func (c *EvalCache) storeHas(p string) bool {
	if c.StoreHas != nil {
		return c.StoreHas(p)
	}
	_, err := os.Stat(p)
	return err == nil
}
