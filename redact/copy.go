package redact

import (
	"fmt"
	"sort"
	"strings"

	"github.com/retrivium/forensic/store"
)

// minArgText is the shortest argument replaced inside other text (an
// error message, a kernel log line): shorter ones ("0", "-v") would
// replace parts of unrelated words. In argument lists every argument is
// replaced.
const minArgText = 6

// minText is the shortest path or host name replaced inside other text
// (a host named "gpu" is, one named "a" only where a whole string is it).
const minText = 3

// replacers builds the replacers of text, longest originals first so a
// path wins over its directory.
func (r *Redactor) replacers() {
	if r.repl != nil {
		return
	}
	var pairs []string
	olds := make([]string, 0, len(r.exact))
	for o := range r.exact {
		if len(o) >= minText {
			olds = append(olds, o)
		}
	}
	byLength(olds)
	for _, o := range olds {
		pairs = append(pairs, o, r.exact[o])
	}
	r.repl = strings.NewReplacer(pairs...)
	var argPairs []string
	args := make([]string, 0, len(r.args))
	for a := range r.args {
		if len(a) >= minArgText {
			args = append(args, a)
		}
	}
	byLength(args)
	for _, a := range args {
		argPairs = append(argPairs, a, r.args[a])
	}
	r.replArgs = strings.NewReplacer(argPairs...)
}

// byLength sorts longest first, then by text.
func byLength(s []string) {
	sort.Slice(s, func(i, j int) bool {
		if len(s[i]) != len(s[j]) {
			return len(s[i]) > len(s[j])
		}
		return s[i] < s[j]
	})
}

// text redacts one string found under key (inArgs: an element of an
// argument list; inEnv: a value of the environment allowlist, which the
// analysis reads, so only a whole path is replaced there).
func (r *Redactor) text(s string, inArgs, inEnv bool) string {
	if p, ok := r.exact[s]; ok {
		return p
	}
	if m := procRoot.FindStringSubmatch(s); m != nil {
		if p, ok := r.exact[m[1]]; ok {
			return strings.TrimSuffix(s, m[1]) + "/" + p
		}
	}
	if inArgs {
		if p, ok := r.args[s]; ok {
			return p
		}
	}
	if inEnv {
		return s
	}
	return r.replArgs.Replace(r.repl.Replace(s))
}

// redact rewrites a JSON value in place; key is the object key it is
// under.
func (r *Redactor) redact(doc any, key string, inEnv bool) any {
	switch x := doc.(type) {
	case map[string]any:
		for k, v := range x {
			x[k] = r.redact(v, k, inEnv || k == "env")
		}
		return x
	case []any:
		for i, v := range x {
			if s, ok := v.(string); ok && argKeys[key] {
				x[i] = r.text(s, true, false)
				continue
			}
			x[i] = r.redact(v, key, inEnv)
		}
		return x
	case string:
		if p, ok := r.users[x]; ok && key == userKey {
			return p
		}
		return r.text(x, false, inEnv)
	}
	return doc
}

// value is the store.RewriteFunc of a redaction.
func (r *Redactor) value(v store.Value) ([]byte, bool, error) {
	rule, known := rules[v.Bucket]
	switch {
	case !known:
		return nil, false, nil
	case rule == ruleRaw:
		r.sum.RawStacks++
		return nil, false, nil
	case rule == ruleCopy || (v.Bucket == "meta" && metaRaw[string(v.Key)]):
		return v.Val, true, nil
	}
	js := v.Val
	if rule == ruleNamed {
		var err error
		if js, err = store.NamedJSON(v.Val); err != nil {
			return nil, false, err
		}
	}
	out, err := r.redactJSON(v.Bucket, v.Key, js)
	if err == nil && rule == ruleNamed {
		out, err = store.NamedValue(out)
	}
	return out, err == nil, err
}

// redactJSON redacts one JSON value of a bucket.
func (r *Redactor) redactJSON(bucket string, key, js []byte) ([]byte, error) {
	doc, err := decode(js)
	if err != nil {
		return nil, fmt.Errorf("%s/%x: %w", bucket, key, err)
	}
	if m, ok := doc.(map[string]any); ok && bucket == "meta" && string(key) == "run" {
		delete(m, "keep_stack_bytes") // the copy holds no stack bytes
	}
	return encode(r.redact(doc, "", false))
}

// Copy writes the redacted copy of a recording to dst, a new file. Learn
// must have read it (and every other recording redacted with it).
func (r *Redactor) Copy(rd *store.Reader, dst string) error {
	r.replacers()
	seen := map[string]bool{}
	err := rd.Each(func(v store.Value) error {
		if _, ok := rules[v.Bucket]; !ok && !seen[v.Bucket] {
			seen[v.Bucket] = true
			r.sum.LeftOut = append(r.sum.LeftOut, "bucket "+v.Bucket)
		}
		return nil
	})
	if err != nil {
		return err
	}
	extra, err := r.namedValues(r.pending[rd])
	if err != nil {
		return err
	}
	return rd.Rewrite(dst, r.value, extra...)
}
