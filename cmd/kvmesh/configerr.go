package main

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error messages about configuration speak the user's language: YAML keys
// by their full path (router.kvmesh.cache_weight), values by what they
// should be (a duration like 30s), flags by their names, never Go types.

var (
	yamlUnknownField = regexp.MustCompile(`^line (\d+): field (\S+) not found in type`)
	yamlBadValue     = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+) `(.*)` into (.+)$")
)

// yamlValueErrors are the keys of a config file that did not decode (type
// errors, unknown keys): the decoder read the rest of the file, so it can
// be validated too, leaving out what names keys (the YAML keys of the
// values that did not decode).
type yamlValueErrors struct {
	err  error
	keys []string
}

func (e *yamlValueErrors) Error() string { return e.err.Error() }
func (e *yamlValueErrors) Unwrap() error { return e.err }

// humanizeYAMLError rewrites the decoder's type errors (one per bad key,
// all reported) in terms of the file: "line 7: router.polcy: unknown key
// (did you mean policy?)", "line 3: shutdown_timeout: 60 has no unit; write
// 60s", as a *yamlValueErrors. Other errors (syntax) are returned as they
// are.
func humanizeYAMLError(err error, data []byte) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	lines := strings.Split(string(data), "\n")
	var errs []error
	var keys []string
	for _, e := range te.Errors {
		if m := yamlUnknownField.FindStringSubmatch(e); m != nil {
			n, _ := strconv.Atoi(m[1])
			path := yamlPathAt(lines, n)
			if len(path) == 0 || path[len(path)-1] != m[2] {
				path = []string{m[2]}
			}
			msg := fmt.Sprintf("line %d: %s: unknown key", n, strings.Join(path, "."))
			if s := suggest(m[2], keysAt(reflect.TypeOf(ServeConfig{}), path[:len(path)-1])); s != "" {
				msg += " (did you mean " + s + "?)"
			}
			errs = append(errs, errors.New(msg))
			continue
		}
		if m := yamlBadValue.FindStringSubmatch(e); m != nil {
			n, _ := strconv.Atoi(m[1])
			key := strings.Join(yamlPathAt(lines, n), ".")
			if key == "" {
				// Unresolved: named generically, and no validation line is
				// left out for it (a key "value" would drop every line
				// with the word in it).
				errs = append(errs, fmt.Errorf("line %d: value: %s", n, badValue(m[2], m[3], m[4])))
				continue
			}
			errs = append(errs, fmt.Errorf("line %d: %s: %s", n, key, badValue(m[2], m[3], m[4])))
			keys = append(keys, key)
			continue
		}
		errs = append(errs, errors.New(e))
	}
	return &yamlValueErrors{err: errors.Join(errs...), keys: keys}
}

// badValue says what is wrong with a value the decoder could not store,
// given its YAML tag and the Go type it was meant for.
func badValue(tag, value, goType string) string {
	switch {
	case goType == "time.Duration":
		if tag == "int" || tag == "float" {
			return fmt.Sprintf("%s has no unit; write %ss (a duration takes a unit: ms, s, m or h)", value, value)
		}
		return fmt.Sprintf("%q is not a duration like 30s, 500ms or 10m", value)
	case strings.HasPrefix(goType, "int") || strings.HasPrefix(goType, "uint"):
		return fmt.Sprintf("%q is not a whole number", value)
	case strings.HasPrefix(goType, "float"):
		return fmt.Sprintf("%q is not a number", value)
	case goType == "bool":
		return fmt.Sprintf("%q is not true or false", value)
	case goType == "string":
		return fmt.Sprintf("%q is not a string", value)
	case strings.HasPrefix(goType, "[]"):
		return fmt.Sprintf("%q is not a list", value)
	}
	return fmt.Sprintf("%q is not a mapping of keys", value)
}

// yamlPathAt returns the path of keys leading to the key on line n
// (1-based) of a block-style YAML file, following indentation up; list
// items ("- name: x") do not add to the path.
func yamlPathAt(lines []string, n int) []string {
	if n < 1 || n > len(lines) {
		return nil
	}
	var path []string
	indent := 1 << 30
	for i := n - 1; i >= 0; i-- {
		line := strings.TrimRight(lines[i], " \t\r")
		trimmed := strings.TrimLeft(line, " ")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		ind := len(line) - len(trimmed)
		item := strings.HasPrefix(trimmed, "- ")
		if item {
			trimmed = strings.TrimLeft(trimmed[2:], " ")
			ind = len(line) - len(trimmed)
		}
		if ind >= indent {
			continue
		}
		key, _, ok := strings.Cut(trimmed, ":")
		if !ok || strings.ContainsAny(key, " \"'{[") {
			if item {
				indent = len(line) - len(strings.TrimLeft(line, " "))
			}
			continue
		}
		path = append(path, key)
		indent = ind
		if item { // the item's own indentation is that of its dash
			indent = len(line) - len(strings.TrimLeft(line, " "))
		}
		if indent == 0 {
			break
		}
	}
	for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
		path[i], path[j] = path[j], path[i]
	}
	return path
}

// keysAt lists the YAML keys of the mapping at path inside type t.
func keysAt(t reflect.Type, path []string) []string {
	for {
		for t.Kind() == reflect.Slice || t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return nil
		}
		if len(path) == 0 {
			break
		}
		f, ok := fieldByYAML(t, path[0])
		if !ok {
			return nil
		}
		t, path = f.Type, path[1:]
	}
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		if k := yamlName(t.Field(i)); k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

func fieldByYAML(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		if yamlName(t.Field(i)) == key {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" || !f.IsExported() {
		return ""
	}
	return name
}

// suggest returns the candidate closest to name when it is close enough to
// be a typo (at most a third of the name's letters differ), or "".
func suggest(name string, candidates []string) string {
	best, bestD := "", len(name)/3+1
	for _, c := range candidates {
		if d := editDistance(name, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
