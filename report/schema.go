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
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(reportSchemaJSON))
	if err != nil {
		return nil, fmt.Errorf("analyze.schema.json: %w", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(ReportSchemaID, doc); err != nil {
		return nil, fmt.Errorf("analyze.schema.json: %w", err)
	}
	return c.Compile(ReportSchemaID)
})

// ValidateReportJSON checks data, the output of `forensic analyze --json`
// (WriteJSON), against the published schema. The error lists every
// violation with its location in the document.
func ValidateReportJSON(data []byte) error {
	sch, err := compiledReportSchema()
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return sch.Validate(inst)
}
