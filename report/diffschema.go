package report

import (
	"bytes"
	_ "embed"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The JSON Schema of `forensic diff --json` is published as
// docs/diff.schema.json; this package embeds report/diff.schema.json, a
// byte-identical copy (`go generate ./report` copies it;
// TestDiffSchemaCopyIdentical fails while the two differ). It refers to
// the analyze schema's definitions (a stack, an attribution).
//
//go:generate cp ../docs/diff.schema.json diff.schema.json

//go:embed diff.schema.json
var diffSchemaJSON []byte

// DiffSchemaID is the $id of the embedded diff schema.
const DiffSchemaID = "https://github.com/retrivium/forensic/docs/diff.schema.json"

// DiffJSONSchema returns the JSON Schema (draft 2020-12) of the
// `forensic diff --json` output.
func DiffJSONSchema() []byte { return bytes.Clone(diffSchemaJSON) }

var compiledDiffSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	return compileSchema(schemaDoc{"analyze.schema.json", ReportSchemaID, reportSchemaJSON},
		schemaDoc{"diff.schema.json", DiffSchemaID, diffSchemaJSON})
})

// ValidateDiffJSON checks data, the output of `forensic diff --json`
// (WriteDiffJSON), against the published schema.
func ValidateDiffJSON(data []byte) error {
	return validateJSON(compiledDiffSchema, data)
}
