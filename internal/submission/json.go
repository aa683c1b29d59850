package submission

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A JSON value as this package holds it: nil, bool, json.Number, string, []any or
// map[string]any. Numbers stay json.Number so that large integers keep every digit.

// Parse reads one JSON document strictly: it must be valid UTF-8, hold exactly one
// value, and repeat no key inside an object. Go's own decoder takes the last of two equal
// keys and replaces invalid UTF-8 silently; a submission read that way could be
// deployed differently from what another reader sees, so both are refused here.
func Parse(raw []byte) (any, error) {
	if !utf8.Valid(raw) {
		return nil, &PathError{Path: "$", Problem: "the document is not valid UTF-8"}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := parseValue(dec, "$", 0)
	if err != nil {
		var pe *PathError
		if errors.As(err, &pe) && pe.syntax {
			pe.Problem += " " + where(raw, dec.InputOffset())
		}
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &PathError{Path: "$", Problem: "there is more after the end of the JSON document"}
	}
	return v, nil
}

// syntaxError words a decoder error; Parse adds where in the text it stopped.
func syntaxError(at string, err error) *PathError {
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) || err.Error() == "EOF" || strings.Contains(err.Error(), "unexpected EOF") {
		return &PathError{Path: at, Problem: "the document ends early: it is empty or cut short (a truncated file?), or a bracket or brace is not closed", syntax: true}
	}
	return &PathError{Path: at, Problem: "not valid JSON: " + err.Error(), syntax: true}
}

// where is "(at byte N, line L)" for an offset into raw.
func where(raw []byte, off int64) string {
	if off > int64(len(raw)) {
		off = int64(len(raw))
	}
	line := 1 + bytes.Count(raw[:off], []byte("\n"))
	return fmt.Sprintf("(stopped at byte %d of %d, line %d)", off, len(raw), line)
}

// MaxDepth bounds the nesting of a document. A configuration is a few levels deep; the
// bound keeps a hostile document from costing time and memory without end.
const MaxDepth = 256

func parseValue(dec *json.Decoder, at string, depth int) (any, error) {
	if depth > MaxDepth {
		return nil, &PathError{Path: at, Problem: fmt.Sprintf("the document nests deeper than %d levels", MaxDepth)}
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, syntaxError(at, err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := map[string]any{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, syntaxError(at, err)
				}
				key, ok := kt.(string)
				if !ok {
					return nil, &PathError{Path: at, Problem: "not valid JSON: an object key is not a string"}
				}
				child := JoinKey(at, key)
				if _, dup := obj[key]; dup {
					return nil, &PathError{Path: child, Problem: "the key appears twice in the same object",
						Fix: "keep one of the two entries; readers disagree on which one wins"}
				}
				v, err := parseValue(dec, child, depth+1)
				if err != nil {
					return nil, err
				}
				obj[key] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, syntaxError(at, err)
			}
			return obj, nil
		case '[':
			arr := []any{}
			for i := 0; dec.More(); i++ {
				v, err := parseValue(dec, JoinIndex(at, i), depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, syntaxError(at, err)
			}
			return arr, nil
		default:
			return nil, &PathError{Path: at, Problem: fmt.Sprintf("not valid JSON: unexpected %q", string(t))}
		}
	case json.Number:
		if _, err := canonicalNumber(t); err != nil {
			return nil, &PathError{Path: at, Problem: err.Error()}
		}
		return t, nil
	case string, bool, nil:
		return t, nil
	default:
		return nil, &PathError{Path: at, Problem: fmt.Sprintf("not valid JSON: unexpected token %v", tok)}
	}
}

// Canonical writes v as canonical JSON: object keys sorted by code point, no
// insignificant white space, strings escaped only where JSON requires it (with the short
// escapes \b \t \n \f \r), integers as written, other numbers in their shortest form
// that reads back as the same float64 (an integral one without fraction or exponent).
// Two documents that hold the same data therefore have the same canonical text and
// the same digest.
func Canonical(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := writeCanonical(&b, v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// CanonicalizeJSON parses raw strictly and returns its canonical text.
func CanonicalizeJSON(raw []byte) ([]byte, error) {
	v, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	return Canonical(v)
}

// DigestOf is the sha256, in lower-case hex, of v's canonical JSON.
func DigestOf(v any) (string, error) {
	c, err := Canonical(v)
	if err != nil {
		return "", err
	}
	return sha256Hex(c), nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func writeCanonical(b *bytes.Buffer, v any) error {
	switch t := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if t {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case json.Number:
		s, err := canonicalNumber(t)
		if err != nil {
			return err
		}
		b.WriteString(s)
	case string:
		writeString(b, t)
	case []any:
		b.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeCanonical(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		keys := sortedKeys(t)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, k)
			b.WriteByte(':')
			if err := writeCanonical(b, t[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		// Only this package builds values; anything else is a programming error.
		return fmt.Errorf("submission: cannot encode %T as JSON data", v)
	}
	return nil
}

func writeString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

var integerLiteral = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// canonicalNumber keeps an integer literal exactly (so that a 20-digit identifier is not
// rounded) and writes every other number as the shortest text of its float64.
func canonicalNumber(n json.Number) (string, error) {
	s := string(n)
	if integerLiteral.MatchString(s) {
		if s == "-0" {
			return "0", nil
		}
		return s, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", fmt.Errorf("the number %s does not fit a 64-bit float", s)
	}
	if f == 0 {
		return "0", nil
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.FormatInt(int64(f), 10), nil
	}
	return strconv.FormatFloat(f, 'g', -1, 64), nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// JoinKey extends a JSON path ("$.a.b") by an object key; keys that are not plain
// names are written in brackets ($["a b"]) so that the path can be read back.
func JoinKey(at, key string) string {
	if plainKey.MatchString(key) {
		return at + "." + key
	}
	q, _ := json.Marshal(key)
	return at + "[" + string(q) + "]"
}

// JoinIndex extends a JSON path by a list index.
func JoinIndex(at string, i int) string {
	return at + "[" + strconv.Itoa(i) + "]"
}

// deepCopy copies objects and lists so that a merge never aliases its inputs.
func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = deepCopy(e)
		}
		return out
	default:
		return v
	}
}

// jsonKind names the kind of a value for error messages.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// isDuplicateKey tells whether err is Parse's refusal of a repeated key.
func isDuplicateKey(err error) bool {
	var pe *PathError
	return errors.As(err, &pe) && strings.Contains(pe.Problem, "appears twice")
}
