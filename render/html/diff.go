package html

import (
	"html/template"
	"io"

	"github.com/retrivium/forensic/report"
)

// diffPage is the page of a comparison: the sentence, the differences in
// rank order (the departing call's stack under it), the runs and the
// process alignment. It needs no network.
var diffPage = template.Must(template.New("diff").Funcs(template.FuncMap{
	"inc":   func(i int) int { return i + 1 },
	"bytes": peakText,
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>forensic diff: {{.Bad.Path}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:60em;color:#222}
h1{font-size:1.3em} .headline{font-size:1.1em;border-left:4px solid #c0392b;padding:.5em 1em;background:#fbeeee}
table{border-collapse:collapse;width:100%} td,th{border-bottom:1px solid #ddd;padding:.3em .5em;text-align:left;vertical-align:top}
.unique{font-weight:bold} .kind{font-family:monospace;white-space:nowrap} pre{margin:.3em 0;font-size:.85em}
</style></head><body>
<h1>forensic diff</h1>
<p class="headline">{{.Headline}}</p>
<h2>Differences</h2>
<table><tr><th>#</th><th>kind</th><th>what differs</th></tr>
{{range $i, $d := .Differences}}<tr{{if $d.Unique}} class="unique"{{end}}><td>{{inc $i}}</td><td class="kind">{{$d.Kind}}</td><td>{{$d.Summary}}
{{with $d.Call}}{{with .Stack}}<pre>{{range .Frames}}{{.Function}}{{if .Library}} ({{.Library}}){{end}}
{{end}}</pre>{{end}}{{end}}</td></tr>
{{else}}<tr><td colspan="3">none found</td></tr>{{end}}
</table>
<p>Bold: no good run has it.</p>
<h2>Runs</h2>
<ul><li>failing ({{.Chosen}}): {{.Bad.Path}}: {{.Bad.Attribution}}. {{.Bad.Verdict}}</li>
{{range .Good}}<li>good: {{.Path}}: {{.Attribution}}</li>{{end}}</ul>
<h2>Processes</h2>
<table><tr><th>failing run</th><th>good run</th><th>matched by</th></tr>
{{range .Processes}}<tr><td>{{with .Failing}}{{.PID}} {{if .Recorded}}{{.Command}}{{else}}(not recorded){{end}}{{with .NVMLPeak}}, NVML peak {{bytes .}}{{end}}{{else}}-{{end}}</td>
<td>{{with .Good}}{{.PID}} {{if .Recorded}}{{.Command}}{{else}}(not recorded){{end}}{{with .NVMLPeak}}, NVML peak {{bytes .}}{{end}}{{else}}-{{end}}</td><td>{{.By}}</td></tr>
{{end}}</table>
{{if .Notes}}<h2>Not compared</h2><ul>{{range .Notes}}<li>{{.}}</li>{{end}}</ul>{{end}}
</body></html>
`))

// WriteDiff writes a comparison of runs as one self-contained HTML page.
func WriteDiff(w io.Writer, d *report.Diff) error {
	return diffPage.Execute(w, d)
}

// peakText formats a byte count a process may lack.
func peakText(v *uint64) string {
	if v == nil {
		return ""
	}
	return report.HumanBytes(*v)
}
