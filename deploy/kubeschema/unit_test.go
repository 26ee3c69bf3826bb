package kubeschema

import (
	"testing"
)

// Instance locations read as kubectl writes field paths: indexes in
// brackets, map keys (even numeric ones) as fields.
func TestFieldPathNamesIndexesAndFields(t *testing.T) {
	inst := map[string]any{
		"spec": map[string]any{
			"containers": []any{map[string]any{"name": "a"}, map[string]any{"name": "b"}},
			"labels":     map[string]any{"0": "x"},
		},
	}
	cases := []struct {
		loc  []string
		want string
	}{
		{nil, ""},
		{[]string{"spec"}, "spec"},
		{[]string{"spec", "containers", "1", "name"}, "spec.containers[1].name"},
		{[]string{"spec", "labels", "0"}, "spec.labels.0"},
	}
	for _, tc := range cases {
		if got := fieldPath(inst, tc.loc); got != tc.want {
			t.Errorf("fieldPath(%q) = %q, want %q", tc.loc, got, tc.want)
		}
	}
}

// Object schemas are closed to the fields they list, at any depth, except
// where Kubernetes keeps unknown fields or the schema says what extra
// keys hold (maps).
func TestCloseObjectsClosesOnlyListedObjects(t *testing.T) {
	s := map[string]any{
		"properties": map[string]any{
			"inline":   map[string]any{"properties": map[string]any{"a": map[string]any{"type": "string"}}},
			"labels":   map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
			"raw":      map[string]any{"properties": map[string]any{}, "x-kubernetes-preserve-unknown-fields": true},
			"list":     map[string]any{"items": map[string]any{"properties": map[string]any{}}},
			"wrapped":  map[string]any{"allOf": []any{map[string]any{"properties": map[string]any{}}}},
			"anything": map[string]any{},
		},
	}
	closeObjects(s)
	props := s["properties"].(map[string]any)
	get := func(name string) map[string]any { return props[name].(map[string]any) }
	cases := []struct {
		name   string
		schema map[string]any
		closed bool
	}{
		{"top", s, true},
		{"inline", get("inline"), true},
		{"labels", get("labels"), false},
		{"raw", get("raw"), false},
		{"list items", get("list")["items"].(map[string]any), true},
		{"allOf member", get("wrapped")["allOf"].([]any)[0].(map[string]any), true},
		{"anything", get("anything"), false},
	}
	for _, tc := range cases {
		if closed := tc.schema["additionalProperties"] == false; closed != tc.closed {
			t.Errorf("%s: closed %v, want %v", tc.name, closed, tc.closed)
		}
	}
}

// The schema file of a group version is named as the Kubernetes
// repository names it.
func TestSpecFileOfAPIVersion(t *testing.T) {
	cases := map[string]string{
		"apps/v1":                   "apis__apps__v1_openapi.json",
		"v1":                        "api__v1_openapi.json",
		"monitoring.coreos.com/v1":  "apis__monitoring.coreos.com__v1_openapi.json",
		"networking.k8s.io/v1beta1": "apis__networking.k8s.io__v1beta1_openapi.json",
	}
	for apiVersion, want := range cases {
		if got := specFile(apiVersion); got != want {
			t.Errorf("specFile(%q) = %q, want %q", apiVersion, got, want)
		}
	}
}
