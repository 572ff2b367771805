package console

import (
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
)

// Chart geometry, in SVG user units: the viewBox scales to the page width,
// so a phone shows the same chart narrower.
const (
	chartWidth  = 600
	chartHeight = 140
	chartPadX   = 4
	chartPadTop = 8
	chartPadBot = 4
)

// chartView is one metric's chart as rendered: the inline SVG and a text
// summary that says the same without the picture (or colour).
type chartView struct {
	Metric, Unit string
	Points       int
	SVG          template.HTML
	Summary      string
}

// renderChart draws s's means over [from, to) as an inline SVG polyline,
// one vertex per point (data-points counts them). A gap longer than two
// steps breaks the line. Only numbers are written into the SVG; the
// metric name is escaped.
func renderChart(s adminapi.MetricSeries, from, to time.Time, step time.Duration) chartView {
	v := chartView{Metric: s.Metric, Unit: s.Unit, Points: len(s.Points)}
	if len(s.Points) == 0 {
		v.Summary = "no data in this range"
		v.SVG = template.HTML(fmt.Sprintf(`<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s: no data" data-points="0"></svg>`,
			chartWidth, chartHeight, template.HTMLEscapeString(s.Metric)))
		return v
	}
	hi, lo := math.Inf(-1), math.Inf(1)
	var sum float64
	var n int64
	for _, p := range s.Points {
		hi, lo = max(hi, p.Mean), min(lo, p.Mean)
		sum += p.Sum
		n += p.N
	}
	top := hi
	if top <= 0 {
		top = 1
	}
	span := to.Sub(from).Seconds()
	if span <= 0 {
		span = 1
	}
	x := func(t time.Time) float64 {
		f := t.Sub(from).Seconds() / span
		return chartPadX + max(0, min(1, f))*(chartWidth-2*chartPadX)
	}
	y := func(val float64) float64 {
		return chartPadTop + (1-max(0, val)/top)*(chartHeight-chartPadTop-chartPadBot)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s over time" data-points="%d" preserveAspectRatio="none">`,
		chartWidth, chartHeight, template.HTMLEscapeString(s.Metric), len(s.Points))
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, chartPadX, chartHeight-chartPadBot, chartWidth-chartPadX, chartHeight-chartPadBot)
	b.WriteString(`<polyline class="line" points="`)
	var prev time.Time
	for i, p := range s.Points {
		if i > 0 && step > 0 && p.T.Sub(prev) > 2*step {
			b.WriteString(`"/><polyline class="line" points="`)
		}
		fmt.Fprintf(&b, "%.1f,%.1f ", x(p.T), y(p.Mean))
		prev = p.T
	}
	b.WriteString(`"/></svg>`)
	v.SVG = template.HTML(b.String())
	mean := 0.0
	if n > 0 {
		mean = sum / float64(n)
	}
	last := s.Points[len(s.Points)-1].Last
	v.Summary = fmt.Sprintf("%d points; lowest mean %s, highest %s, overall mean %s, last %s %s",
		len(s.Points), num(lo), num(hi), num(mean), num(last), s.Unit)
	return v
}

// num formats a metric value compactly.
func num(f float64) string {
	switch a := math.Abs(f); {
	case a >= 1e9:
		return fmt.Sprintf("%.2fG", f/1e9)
	case a >= 1e6:
		return fmt.Sprintf("%.2fM", f/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.1fk", f/1e3)
	}
	return fmt.Sprintf("%.2f", f)
}
