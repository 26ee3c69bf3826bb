// Package html renders a report as one self-contained HTML page: the
// verdict first, then what to try next, the evidence, what was missing,
// the failures, a timeline (per GPU, the framebuffer and the BAR1 aperture
// in separate panels with their own axes, never stacked or added; the
// calls of each process on the same time axis), the memory-view table,
// the processes, the kernel log and markers, loss and sampling, coverage
// and the calls per symbol.
//
// A report on several runs of one job adds a Runs section after the
// verdict: the runs on one wall-clock axis, the order of their first
// failures, the failures that could have come first (each with its own
// verdict) and those that followed; the rest of the page is the chosen
// run's.
//
// The page is html/template files with their CSS and JavaScript as
// separate files, all embedded (html/report.html, timeline.html,
// runs.html, report.css, report.js).
// The Go side only prepares a view model from the report; escaping is
// structural. The page inlines its CSS, SVG and script and loads nothing
// from the network, so it can be attached to a post-mortem as is.
//
// It scales with the recording, not with the number of calls: everything
// it draws comes from report.Timeline, which the analysis builds in fixed
// sizes.
package html

import (
	"bufio"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"strings"
	"unicode"

	"github.com/retrivium/forensic/report"
)

//go:embed html
var files embed.FS

// parse parses the page template; report.css and report.js are templates
// too, included into the page's <style> and <script> as static text.
func parse() (*template.Template, error) {
	t, err := template.New("report.html").Funcs(template.FuncMap{"breakable": breakable}).ParseFS(files, "html/report.html", "html/timeline.html", "html/runs.html", "html/report.css", "html/report.js")
	if err != nil {
		return nil, fmt.Errorf("html report template: %w", err)
	}
	return t, nil
}

// breakable is an identifier, path or API name (cuMemAlloc_v2,
// nvmlDeviceGetMemoryInfo_v2, /usr/lib/libcuda.so.1) escaped, with line
// break opportunities (<wbr>) after '_', '/', '.' and ',' and between a
// lower-case letter and an upper-case one, so a narrow table column wraps
// it at a readable place instead of overflowing the page.
func breakable(s string) template.HTML {
	var b strings.Builder
	var prev rune
	for _, r := range s {
		if unicode.IsUpper(r) && unicode.IsLower(prev) {
			b.WriteString("<wbr>")
		}
		b.WriteString(template.HTMLEscapeString(string(r)))
		if strings.ContainsRune("_/.,", r) {
			b.WriteString("<wbr>")
		}
		prev = r
	}
	return template.HTML(b.String()) // every piece of s was escaped above
}

// Write writes the report as one self-contained HTML page.
func Write(w io.Writer, rep *report.Report) error {
	if rep == nil {
		return errors.New("html report: no report to write")
	}
	t, err := parse()
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	if err := t.Execute(bw, newPage(rep)); err != nil {
		return fmt.Errorf("html report: %w", err)
	}
	return bw.Flush()
}
