package coco

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a JSON tokenizer over an io.Reader with its own buffer, so
// tokens cost no allocation and every error knows its byte offset. It
// accepts the tokens NaN, Infinity and -Infinity as numbers because some
// COCO writers (Python's json module) emit them; the reader then skips the
// annotation that holds them.
type scanner struct {
	rd   io.Reader
	buf  []byte
	pos  int
	end  int
	base int64 // file offset of buf[0]
	rerr error // sticky read error (io.EOF at the end)
	tok  []byte
	key0 []byte // the last key, copied out of buf
}

// syntaxError is a malformed document at a byte offset.
type syntaxError struct {
	off int64
	msg string
}

func (e *syntaxError) Error() string { return e.msg }

// scanBufferSize is the read buffer; tests shrink it so that every token
// boundary falls on a buffer boundary somewhere.
var scanBufferSize = 1 << 20

// newScanner reads r; sizeHint, the input size when known, keeps the
// buffer no larger than the input needs.
func newScanner(r io.Reader, sizeHint int64) *scanner {
	n := scanBufferSize
	if sizeHint > 0 && sizeHint < int64(n) {
		n = max(int(sizeHint)+1, 512)
		n = min(n, scanBufferSize)
	}
	return &scanner{rd: r, buf: make([]byte, n)}
}

func (s *scanner) offset() int64 { return s.base + int64(s.pos) }

func (s *scanner) errf(off int64, format string, args ...any) error {
	return &syntaxError{off: off, msg: fmt.Sprintf(format, args...)}
}

// fill reads more input; false at the end or on a read error.
func (s *scanner) fill() bool {
	if s.rerr != nil {
		return false
	}
	s.base += int64(s.end)
	s.pos, s.end = 0, 0
	for s.end == 0 {
		n, err := s.rd.Read(s.buf)
		s.end = n
		if err != nil {
			s.rerr = err
			return n > 0
		}
	}
	return true
}

// eofErr is the error for input ending where more was expected.
func (s *scanner) eofErr(what string) error {
	if s.rerr != nil && !errors.Is(s.rerr, io.EOF) {
		return fmt.Errorf("byte %d: reading: %w", s.offset(), s.rerr)
	}
	return s.errf(s.offset(), "unexpected end of input (truncated file?) %s", what)
}

// peek skips whitespace and returns the next byte without consuming it.
func (s *scanner) peek() (byte, bool) {
	for {
		for s.pos < s.end {
			c := s.buf[s.pos]
			if c != ' ' && c != '\n' && c != '\r' && c != '\t' {
				return c, true
			}
			s.pos++
		}
		if !s.fill() {
			return 0, false
		}
	}
}

// expect consumes byte c after whitespace.
func (s *scanner) expect(c byte, what string) error {
	got, ok := s.peek()
	if !ok {
		return s.eofErr("expecting " + strconv.QuoteRune(rune(c)) + " " + what)
	}
	if got != c {
		return s.errf(s.offset(), "expecting %q %s, found %q", c, what, got)
	}
	s.pos++
	return nil
}

// more handles the separator inside an array or object: it returns true
// when another element follows, false at the closing byte (consumed).
// first is true before the first element.
func (s *scanner) more(closing byte, first bool, what string) (bool, error) {
	c, ok := s.peek()
	if !ok {
		return false, s.eofErr("inside " + what)
	}
	if c == closing {
		s.pos++
		return false, nil
	}
	if first {
		return true, nil
	}
	if c != ',' {
		return false, s.errf(s.offset(), "expecting ',' or %q in %s, found %q", closing, what, c)
	}
	s.pos++
	c, ok = s.peek()
	if !ok {
		return false, s.eofErr("inside " + what)
	}
	if c == closing {
		return false, s.errf(s.offset(), "trailing comma in %s", what)
	}
	return true, nil
}

// key reads an object key and its colon; the key is valid until the next
// token.
func (s *scanner) key(what string) ([]byte, error) {
	c, _ := s.peek()
	if c != '"' {
		if s.pos >= s.end {
			return nil, s.eofErr("expecting a key in " + what)
		}
		return nil, s.errf(s.offset(), "expecting a string key in %s, found %q", what, c)
	}
	k, err := s.str()
	if err != nil {
		return nil, err
	}
	// k may alias the read buffer, which finding the colon can refill.
	s.key0 = append(s.key0[:0], k...)
	return s.key0, s.expect(':', "after a key")
}

// str reads a string token (the opening quote is next) and returns its
// unescaped bytes, valid until the next token.
func (s *scanner) str() ([]byte, error) {
	start := s.offset()
	s.pos++ // opening quote, already peeked
	// Fast path: the whole string is in the buffer and has no escapes.
	for i := s.pos; i < s.end; i++ {
		c := s.buf[i]
		if c == '"' {
			t := s.buf[s.pos:i]
			if !utf8.Valid(t) {
				return nil, s.errf(start, "string is not valid UTF-8")
			}
			s.pos = i + 1
			return t, nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
	}
	s.tok = s.tok[:0]
	var pend rune // high surrogate waiting for its low half
	flush := func() {
		if pend != 0 {
			s.tok = utf8.AppendRune(s.tok, utf8.RuneError)
			pend = 0
		}
	}
	for {
		if s.pos >= s.end && !s.fill() {
			return nil, s.eofErr("inside the string starting at byte " + strconv.FormatInt(start, 10))
		}
		// Fast path: copy the run of plain bytes.
		i := s.pos
		for i < s.end {
			c := s.buf[i]
			if c == '"' || c == '\\' || c < 0x20 {
				break
			}
			i++
		}
		if i > s.pos {
			flush()
		}
		s.tok = append(s.tok, s.buf[s.pos:i]...)
		s.pos = i
		if i == s.end {
			continue
		}
		c := s.buf[i]
		switch {
		case c == '"':
			s.pos++
			flush()
			if !utf8.Valid(s.tok) {
				return nil, s.errf(start, "string is not valid UTF-8")
			}
			return s.tok, nil
		case c < 0x20:
			return nil, s.errf(s.offset(), "control character %#x in string", c)
		}
		// Escape.
		s.pos++
		e, ok := s.byte()
		if !ok {
			return nil, s.eofErr("inside a string escape")
		}
		if e != 'u' {
			flush()
		}
		switch e {
		case '"', '\\', '/':
			s.tok = append(s.tok, e)
		case 'b':
			s.tok = append(s.tok, '\b')
		case 'f':
			s.tok = append(s.tok, '\f')
		case 'n':
			s.tok = append(s.tok, '\n')
		case 'r':
			s.tok = append(s.tok, '\r')
		case 't':
			s.tok = append(s.tok, '\t')
		case 'u':
			r, err := s.hex4()
			if err != nil {
				return nil, err
			}
			if pend != 0 && r >= 0xDC00 && r < 0xE000 {
				s.tok = utf8.AppendRune(s.tok, utf16.DecodeRune(pend, r))
				pend = 0
				continue
			}
			flush()
			if r >= 0xD800 && r < 0xDC00 {
				pend = r
				continue
			}
			if utf16.IsSurrogate(r) {
				r = utf8.RuneError // lone low surrogate, as encoding/json does
			}
			s.tok = utf8.AppendRune(s.tok, r)
			continue
		default:
			return nil, s.errf(s.offset()-1, "invalid escape \\%c in string", e)
		}
	}
}

func (s *scanner) byte() (byte, bool) {
	if s.pos >= s.end && !s.fill() {
		return 0, false
	}
	c := s.buf[s.pos]
	s.pos++
	return c, true
}

func (s *scanner) hex4() (rune, error) {
	var r rune
	for range 4 {
		c, ok := s.byte()
		if !ok {
			return 0, s.eofErr("inside a \\u escape")
		}
		var v byte
		switch {
		case '0' <= c && c <= '9':
			v = c - '0'
		case 'a' <= c && c <= 'f':
			v = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, s.errf(s.offset()-1, "invalid hex digit %q in \\u escape", c)
		}
		r = r<<4 | rune(v)
	}
	return r, nil
}

// wordByte marks the bytes a bare token (number or literal) is made of.
var wordByte = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '-' || c == '+'
	}
	return t
}()

// word reads a bare token. It returns a slice of the read buffer when the
// token lies inside it (almost always), else a copy in s.tok; either is
// valid until the next token.
func (s *scanner) word() []byte {
	if s.pos >= s.end && !s.fill() {
		return nil
	}
	i := s.pos
	for i < s.end && wordByte[s.buf[i]] {
		i++
	}
	if i < s.end {
		w := s.buf[s.pos:i]
		s.pos = i
		return w
	}
	s.tok = append(s.tok[:0], s.buf[s.pos:i]...)
	s.pos = i
	for s.fill() {
		i := 0
		for i < s.end && wordByte[s.buf[i]] {
			i++
		}
		s.tok = append(s.tok, s.buf[:i]...)
		s.pos = i
		if i < s.end {
			break
		}
	}
	return s.tok
}

// kind of a scalar token.
type kind uint8

const (
	kNumber kind = iota
	kString
	kBool
	kNull
	kArray
	kObject
)

func (k kind) String() string {
	return [...]string{"number", "string", "boolean", "null", "array", "object"}[k]
}

// kindOf classifies the value that starts with c.
func kindOf(c byte) kind {
	switch {
	case c == '"':
		return kString
	case c == '[':
		return kArray
	case c == '{':
		return kObject
	case c == 't' || c == 'f':
		return kBool
	case c == 'n':
		return kNull
	}
	return kNumber
}

// number reads a number token. raw is the token text (valid until the next
// token); integral reports whether it has neither fraction nor exponent.
func (s *scanner) number() (v float64, raw []byte, err error) {
	off := s.offset()
	raw = s.word()
	v, ok := parseNumber(raw)
	if !ok {
		if len(raw) == 0 {
			c, _ := s.peek()
			return 0, nil, s.errf(off, "expecting a value, found %q", c)
		}
		return 0, nil, s.errf(off, "invalid number %q", raw)
	}
	return v, raw, nil
}

// literal reads true, false or null.
func (s *scanner) literal() (bool, error) {
	off := s.offset()
	w := s.word()
	switch string(w) {
	case "true":
		return true, nil
	case "false", "null":
		return false, nil
	}
	return false, s.errf(off, "invalid literal %q", w)
}

// skip consumes one value of any kind, checking its syntax.
func (s *scanner) skip() error {
	return s.skipDepth(0)
}

const maxDepth = 10000

func (s *scanner) skipDepth(depth int) error {
	if depth > maxDepth {
		return s.errf(s.offset(), "nesting deeper than %d", maxDepth)
	}
	c, ok := s.peek()
	if !ok {
		return s.eofErr("expecting a value")
	}
	switch kindOf(c) {
	case kString:
		_, err := s.str()
		return err
	case kBool, kNull:
		_, err := s.literal()
		return err
	case kNumber:
		_, _, err := s.number()
		return err
	case kArray:
		s.pos++
		for first := true; ; first = false {
			more, err := s.more(']', first, "array")
			if err != nil || !more {
				return err
			}
			if err := s.skipDepth(depth + 1); err != nil {
				return err
			}
		}
	default:
		s.pos++
		for first := true; ; first = false {
			more, err := s.more('}', first, "object")
			if err != nil || !more {
				return err
			}
			if _, err := s.key("object"); err != nil {
				return err
			}
			if err := s.skipDepth(depth + 1); err != nil {
				return err
			}
		}
	}
}

// pow10 holds the powers of ten that float64 represents exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// parseNumber validates b against JSON's number grammar (plus NaN,
// Infinity, -Infinity) and converts it to the nearest float64, exactly as
// strconv.ParseFloat(b, 64) would. Numbers of up to 15 significant digits
// without exponent, which are almost all of COCO, take an exact fast path:
// both the integer mantissa and the power of ten are exact in float64, so
// one IEEE division rounds correctly.
func parseNumber(b []byte) (float64, bool) {
	switch string(b) {
	case "NaN":
		return math.NaN(), true
	case "Infinity":
		return math.Inf(1), true
	case "-Infinity":
		return math.Inf(-1), true
	}
	i := 0
	neg := false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	if i >= len(b) {
		return 0, false
	}
	var mant uint64
	nd := 0 // significant digits accumulated
	exact := true
	if b[i] == '0' {
		i++
	} else if b[i] >= '1' && b[i] <= '9' {
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if nd < 19 {
				mant = mant*10 + uint64(b[i]-'0')
				nd++
			} else {
				exact = false
			}
			i++
		}
	} else {
		return 0, false
	}
	frac := 0
	if i < len(b) && b[i] == '.' {
		i++
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if nd == 0 && b[i] == '0' {
				frac++ // leading zeros of 0.00x scale but add no digits
			} else if nd < 19 {
				mant = mant*10 + uint64(b[i]-'0')
				nd++
				frac++
			} else {
				exact = false
			}
			i++
		}
		if i == j {
			return 0, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == j {
			return 0, false
		}
		exact = false
	}
	if i != len(b) {
		return 0, false
	}
	if exact && mant < 1<<53 && frac < len(pow10) {
		f := float64(mant)
		if frac > 0 {
			f /= pow10[frac]
		}
		if neg {
			f = -f
		}
		return f, true
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		// Grammar is already valid, so this is only out of range: ±Inf,
		// which the caller treats as non-finite.
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			return f, true
		}
		return 0, false
	}
	return f, true
}
