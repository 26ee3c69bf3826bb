package report

import (
	"strings"
	"testing"
)

// Both published schemas go through one compiler: a document that is not
// JSON is named in the error, and input that is not JSON is refused as
// such by either validator.
func TestSchemasShareOneCompiler(t *testing.T) {
	if _, err := compileSchema(schemaDoc{"broken.schema.json", "https://example.invalid/broken.json", []byte("{")}); err == nil || !strings.HasPrefix(err.Error(), "broken.schema.json: ") {
		t.Errorf("compiling a broken document: %v, want an error naming it", err)
	}
	for name, validate := range map[string]func([]byte) error{"analyze": ValidateReportJSON, "diff": ValidateDiffJSON} {
		t.Run(name, func(t *testing.T) {
			if err := validate([]byte("not json")); err == nil || !strings.HasPrefix(err.Error(), "not JSON: ") {
				t.Errorf("validating text that is not JSON: %v", err)
			}
			if err := validate([]byte("{}")); err == nil {
				t.Error("an empty object passed the schema")
			}
		})
	}
}
