package report

import (
	"bytes"
	_ "embed"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The JSON Schema of the --json contract is published as
// docs/analyze.schema.json. go:embed cannot reach ../docs, so this package
// embeds report/analyze.schema.json, a byte-identical copy: edit the docs
// file, then run `go generate ./report` (TestSchemaCopyIdentical fails
// while the two differ).
//
//go:generate cp ../docs/analyze.schema.json analyze.schema.json

//go:embed analyze.schema.json
var reportSchemaJSON []byte

// ReportSchemaID is the $id of the embedded schema.
const ReportSchemaID = "https://github.com/retrivium/forensic/docs/analyze.schema.json"

// ReportJSONSchema returns the JSON Schema (draft 2020-12) of the
// `forensic analyze --json` output.
func ReportJSONSchema() []byte { return bytes.Clone(reportSchemaJSON) }

var compiledReportSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	return compileSchema(schemaDoc{"analyze.schema.json", ReportSchemaID, reportSchemaJSON})
})

// ValidateReportJSON checks data, the output of `forensic analyze --json`
// (WriteJSON), against the published schema. The error lists every
// violation with its location in the document.
func ValidateReportJSON(data []byte) error {
	return validateJSON(compiledReportSchema, data)
}

// schemaDoc is one embedded schema document: its file's name (for
// errors), its $id and its text.
type schemaDoc struct {
	name, id string
	data     []byte
}

// compileSchema compiles the last of docs; the others are documents it
// refers to.
func compileSchema(docs ...schemaDoc) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	for _, d := range docs {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(d.data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.name, err)
		}
		if err := c.AddResource(d.id, doc); err != nil {
			return nil, fmt.Errorf("%s: %w", d.name, err)
		}
	}
	return c.Compile(docs[len(docs)-1].id)
}

// validateJSON checks data against the schema compiled returns.
func validateJSON(compiled func() (*jsonschema.Schema, error), data []byte) error {
	sch, err := compiled()
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return sch.Validate(inst)
}
