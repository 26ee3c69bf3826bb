// Package html renders a report as one self-contained HTML page.
//
// This is an interim page (the verdict and the failures) while the full
// report moves to html/template; see html.go.orig for the page it replaces.
package html

import (
	"html/template"
	"io"

	"github.com/retrivium/forensic/report"
)

var page = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>forensic report: {{.Attribution}}</title></head>
<body><main><h1>Verdict: {{.Attribution}}</h1><p>{{.Verdict}}</p>
<ul>{{range .Failures}}<li><code>{{.Symbol}}</code> {{.ResultName}}</li>{{end}}</ul></main></body></html>
`))

// Write writes the report as one self-contained HTML page.
func Write(w io.Writer, rep *report.Report) error { return page.Execute(w, rep) }
