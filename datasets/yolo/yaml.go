package yolo

import (
	"fmt"
	"strconv"
	"strings"
)

// yamlValue is a node of the YAML subset data.yaml files use: a scalar, a
// list of scalars or a map of scalars.
type yamlValue struct {
	scalar string
	isList bool
	list   []string
	isMap  bool
	keys   []string // in file order
	m      map[string]string
	line   int
}

// parseDataYAML reads the subset of YAML that Ultralytics data.yaml files
// use: top-level "key: value" pairs whose values are scalars (plain,
// 'single' or "double" quoted), flow lists [a, b], flow maps {0: a}, or a
// block list ("- a") or block map ("0: a") indented below the key;
// comments and blank lines. Anything else (anchors, multi-line strings,
// nesting deeper than one level) is an error naming the line, rather than
// a guess. Writing this (~150 lines) keeps the module free of a YAML
// dependency for five keys.
func parseDataYAML(text string) (map[string]*yamlValue, error) {
	out := map[string]*yamlValue{}
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	var cur *yamlValue // value whose block items are being read
	curIndent := -1
	for i, raw := range lines {
		ln := i + 1
		line := stripComment(raw)
		if strings.TrimSpace(line) == "" || strings.TrimSpace(line) == "---" {
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(line), "...") {
			break
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if strings.HasPrefix(strings.TrimLeft(line, " "), "\t") {
			return nil, fmt.Errorf("line %d: tab indentation is not YAML", ln)
		}
		body := strings.TrimSpace(line)
		// YAML lets a block list sit at its key's own indentation.
		zeroIndentItem := indent == 0 && cur != nil && !cur.isMap && (body == "-" || strings.HasPrefix(body, "- "))
		if indent > 0 || zeroIndentItem {
			if cur == nil {
				return nil, fmt.Errorf("line %d: unexpected indentation", ln)
			}
			if curIndent >= 0 && indent != curIndent {
				return nil, fmt.Errorf("line %d: inconsistent indentation (nested blocks are not supported)", ln)
			}
			curIndent = indent
			if item, ok := strings.CutPrefix(body, "-"); ok && (item == "" || item[0] == ' ') {
				if cur.isMap {
					return nil, fmt.Errorf("line %d: list item inside a map", ln)
				}
				v, err := unquote(strings.TrimSpace(item))
				if err != nil {
					return nil, fmt.Errorf("line %d: %w", ln, err)
				}
				cur.isList = true
				cur.list = append(cur.list, v)
				continue
			}
			k, v, ok := splitKey(body)
			if !ok || cur.isList {
				return nil, fmt.Errorf("line %d: want \"- item\" or \"key: value\" in the block", ln)
			}
			val, err := unquote(v)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", ln, err)
			}
			if cur.m == nil {
				cur.m = map[string]string{}
			}
			if _, dup := cur.m[k]; dup {
				return nil, fmt.Errorf("line %d: key %q repeated", ln, k)
			}
			cur.isMap = true
			cur.keys = append(cur.keys, k)
			cur.m[k] = val
			continue
		}
		k, v, ok := splitKey(body)
		if !ok {
			return nil, fmt.Errorf("line %d: want \"key: value\", found %q", ln, body)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("line %d: key %q repeated", ln, k)
		}
		val := &yamlValue{line: ln}
		out[k] = val
		cur, curIndent = nil, -1
		switch {
		case v == "":
			cur = val // a block may follow
		case strings.HasPrefix(v, "["):
			items, err := flowItems(v, '[', ']')
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", ln, err)
			}
			val.isList, val.list = true, items
		case strings.HasPrefix(v, "{"):
			items, err := flowItems(v, '{', '}')
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", ln, err)
			}
			val.isMap, val.m = true, map[string]string{}
			for _, it := range items {
				ik, iv, ok := splitKey(it)
				if !ok {
					return nil, fmt.Errorf("line %d: flow map item %q is not key: value", ln, it)
				}
				if iv, err = unquote(iv); err != nil {
					return nil, fmt.Errorf("line %d: %w", ln, err)
				}
				val.keys = append(val.keys, ik)
				val.m[ik] = iv
			}
		case strings.HasPrefix(v, "&") || strings.HasPrefix(v, "*") || strings.HasPrefix(v, "|") || strings.HasPrefix(v, ">"):
			return nil, fmt.Errorf("line %d: anchors, aliases and block strings are not supported", ln)
		default:
			s, err := unquote(v)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", ln, err)
			}
			val.scalar = s
		}
	}
	return out, nil
}

// stripComment removes a # comment that is outside quotes.
func stripComment(line string) string {
	var q byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '\'' || c == '"':
			q = c
		case c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i]
		}
	}
	return line
}

// splitKey splits "key: value" at the first ": " (or a trailing ":")
// outside quotes; the key may be quoted.
func splitKey(s string) (string, string, bool) {
	var q byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '\'' || c == '"':
			q = c
		case c == ':' && (i+1 == len(s) || s[i+1] == ' '):
			k, err := unquote(strings.TrimSpace(s[:i]))
			if err != nil || k == "" {
				return "", "", false
			}
			return k, strings.TrimSpace(s[i+1:]), true
		}
	}
	return "", "", false
}

// flowItems splits "[a, 'b, c', d]" into its items, honouring quotes.
func flowItems(s string, open, close byte) ([]string, error) {
	if s[0] != open || s[len(s)-1] != close {
		return nil, fmt.Errorf("flow collection %q must end on the same line with %q", s, close)
	}
	inner := s[1 : len(s)-1]
	var items []string
	var q byte
	start := 0
	for i := 0; i <= len(inner); i++ {
		if i < len(inner) {
			c := inner[i]
			if q != 0 {
				if c == q {
					q = 0
				}
				continue
			}
			if c == '\'' || c == '"' {
				q = c
				continue
			}
			if c == '[' || c == '{' {
				return nil, fmt.Errorf("nested flow collections are not supported")
			}
			if c != ',' {
				continue
			}
		}
		it := strings.TrimSpace(inner[start:i])
		start = i + 1
		if it == "" {
			if i == len(inner) {
				break // trailing comma or empty collection
			}
			return nil, fmt.Errorf("empty item in %q", s)
		}
		if open == '[' {
			v, err := unquote(it)
			if err != nil {
				return nil, err
			}
			it = v
		}
		items = append(items, it)
	}
	if q != 0 {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	return items, nil
}

// unquote returns a plain scalar as is and a quoted one without quotes.
func unquote(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	switch s[0] {
	case '\'':
		if len(s) < 2 || s[len(s)-1] != '\'' {
			return "", fmt.Errorf("unterminated quote in %s", s)
		}
		return strings.ReplaceAll(s[1:len(s)-1], "''", "'"), nil
	case '"':
		v, err := strconv.Unquote(s)
		if err != nil {
			return "", fmt.Errorf("bad double-quoted string %s", s)
		}
		return v, nil
	}
	if s == "~" || s == "null" {
		return "", nil
	}
	return s, nil
}
