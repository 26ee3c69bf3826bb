package kubeschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"sigs.k8s.io/yaml"
)

// Validator checks manifests against the schemas of one release. It is
// safe for concurrent use.
type Validator struct {
	release Release
	dir     string

	mu       sync.Mutex
	compiled map[string]*jsonschema.Schema // by apiVersion + " " + kind
}

// NewValidator returns a validator for release r whose OpenAPI v3
// schema files are in dir (as Fetch returns it).
func NewValidator(r Release, dir string) *Validator {
	return &Validator{release: r, dir: dir, compiled: map[string]*jsonschema.Schema{}}
}

// Release is the release v validates against.
func (v *Validator) Release() Release { return v.release }

// Violation is one thing the release refuses in a manifest.
type Violation struct {
	// Path is the place in the object, "spec.template.spec.hostPID".
	Path string
	// Problem says what is wrong there: "unknown field", or the
	// validator's words for a wrong type or a missing field.
	Problem string
}

func (v Violation) String() string { return v.Path + ": " + v.Problem }

// Error is a manifest that a release refuses, with every reason.
type Error struct {
	Release    Release
	Object     string // "DaemonSet forensic"
	Violations []Violation
}

func (e *Error) Error() string {
	lines := []string{fmt.Sprintf("%s refuses %s:", e.Release, e.Object)}
	for _, v := range e.Violations {
		lines = append(lines, "  "+v.String())
	}
	return strings.Join(lines, "\n")
}

// documentSeparator splits a YAML stream into its documents.
var documentSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// ValidateYAML validates every object of a YAML manifest (one document
// or several separated by ---). The error is an *Error for the first
// object the release refuses; other errors say why it could not be
// checked.
func (v *Validator) ValidateYAML(manifest []byte) error {
	checked := 0
	for _, doc := range documentSeparator.Split(string(manifest), -1) {
		data, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			return fmt.Errorf("%s: %w", v.release, err)
		}
		if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
			continue // a comment-only document
		}
		if err := v.ValidateJSON(data); err != nil {
			return err
		}
		checked++
	}
	if checked == 0 {
		return errors.New("no object in the manifest")
	}
	return nil
}

// ValidateJSON validates one object in JSON.
func (v *Validator) ValidateJSON(data []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s: %w", v.release, err)
	}
	obj, ok := inst.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: the manifest is not an object", v.release)
	}
	apiVersion, _ := obj["apiVersion"].(string)
	kindName, _ := obj["kind"].(string)
	if apiVersion == "" || kindName == "" {
		return fmt.Errorf("%s: the object has no apiVersion or kind", v.release)
	}
	sch, err := v.schema(apiVersion, kindName)
	if err != nil {
		return err
	}
	verr := sch.Validate(inst)
	if verr == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(verr, &ve) {
		return fmt.Errorf("%s: %w", v.release, verr)
	}
	name := kindName
	if meta, ok := obj["metadata"].(map[string]any); ok {
		if n, ok := meta["name"].(string); ok {
			name += " " + n
		}
	}
	return &Error{Release: v.release, Object: name, Violations: violations(ve, inst)}
}

// schema returns the compiled schema of apiVersion's kind.
func (v *Validator) schema(apiVersion, kindName string) (*jsonschema.Schema, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	key := apiVersion + " " + kindName
	if s, ok := v.compiled[key]; ok {
		return s, nil
	}
	s, err := compile(v.release, filepath.Join(v.dir, specFile(apiVersion)), apiVersion, kindName)
	if err != nil {
		return nil, err
	}
	v.compiled[key] = s
	return s, nil
}

// openAPI is the part of an OpenAPI v3 document that holds the schemas.
type openAPI struct {
	Components struct {
		Schemas map[string]map[string]any `json:"schemas"`
	} `json:"components"`
}

// compile reads the schemas of file and compiles the one of kindName.
func compile(r Release, file, apiVersion, kindName string) (*jsonschema.Schema, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s has no API %s", r, apiVersion)
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w", r, err)
	}
	var doc openAPI
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", r, filepath.Base(file), err)
	}
	name := schemaOf(doc.Components.Schemas, apiVersion, kindName)
	if name == "" {
		return nil, fmt.Errorf("%s has no kind %s in %s", r, kindName, apiVersion)
	}
	schemas := map[string]any{}
	for n, s := range doc.Components.Schemas {
		closeObjects(s)
		schemas[n] = s
	}
	// The $refs are "#/components/schemas/NAME", so the resource keeps
	// that shape. The round trip through JSON gives the validator the
	// json.Number values it reads.
	root, err := json.Marshal(map[string]any{"components": map[string]any{"schemas": schemas}})
	if err != nil {
		return nil, err
	}
	res, err := jsonschema.UnmarshalJSON(bytes.NewReader(root))
	if err != nil {
		return nil, err
	}
	url := "urn:kubernetes:" + r.Module + ":" + filepath.Base(file)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(url, res); err != nil {
		return nil, fmt.Errorf("%s: %w", r, err)
	}
	s, err := c.Compile(url + "#/components/schemas/" + name)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", r, name, err)
	}
	return s, nil
}

// schemaOf returns the name of the schema of apiVersion's kindName, the
// one whose x-kubernetes-group-version-kind names it.
func schemaOf(schemas map[string]map[string]any, apiVersion, kindName string) string {
	group, version, ok := strings.Cut(apiVersion, "/")
	if !ok {
		group, version = "", apiVersion
	}
	for name, s := range schemas {
		gvks, _ := s["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			m, _ := g.(map[string]any)
			if m["group"] == group && m["version"] == version && m["kind"] == kindName {
				return name
			}
		}
	}
	return ""
}

// closeObjects makes every object schema below s with listed properties
// refuse the fields it does not list, as the API server's strict field
// validation does (the published schemas leave additionalProperties
// open). Objects marked x-kubernetes-preserve-unknown-fields stay open.
func closeObjects(s map[string]any) {
	if props, ok := s["properties"].(map[string]any); ok {
		if _, set := s["additionalProperties"]; !set && s["x-kubernetes-preserve-unknown-fields"] != true {
			s["additionalProperties"] = false
		}
		for _, p := range props {
			if ps, ok := p.(map[string]any); ok {
				closeObjects(ps)
			}
		}
	}
	for _, kw := range []string{"items", "additionalProperties"} {
		if sub, ok := s[kw].(map[string]any); ok {
			closeObjects(sub)
		}
	}
	for _, kw := range []string{"allOf", "oneOf", "anyOf"} {
		subs, _ := s[kw].([]any)
		for _, sub := range subs {
			if m, ok := sub.(map[string]any); ok {
				closeObjects(m)
			}
		}
	}
}

// violations flattens the validator's tree of errors into its leaves,
// each at its place in inst.
func violations(ve *jsonschema.ValidationError, inst any) []Violation {
	printer := message.NewPrinter(language.English)
	var out []Violation
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		path := fieldPath(inst, e.InstanceLocation)
		if ap, ok := e.ErrorKind.(*kind.AdditionalProperties); ok {
			for _, p := range ap.Properties {
				out = append(out, Violation{Path: joinField(path, p), Problem: "unknown field"})
			}
			return
		}
		if path == "" {
			path = "(the object)"
		}
		out = append(out, Violation{Path: path, Problem: e.ErrorKind.LocalizedString(printer)})
	}
	walk(ve)
	slices.SortFunc(out, func(a, b Violation) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(out)
}

// fieldPath writes an instance location the way kubectl names fields:
// spec.containers[0].name.
func fieldPath(inst any, loc []string) string {
	var b strings.Builder
	v := inst
	for _, tok := range loc {
		switch t := v.(type) {
		case []any:
			i, _ := strconv.Atoi(tok)
			fmt.Fprintf(&b, "[%d]", i)
			if i >= 0 && i < len(t) {
				v = t[i]
			}
		case map[string]any:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(tok)
			v = t[tok]
		}
	}
	return b.String()
}

func joinField(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}
