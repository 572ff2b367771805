package console

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
)

// Chart geometry, in SVG user units. The viewBox keeps its aspect ratio and
// scales to the figure's width; the plot sits inside margins that hold the
// value labels (left) and the time labels (below).
const (
	chartWidth  = 600
	chartHeight = 200
	plotLeft    = 84  // room for a value label such as "512 MiB"
	plotRight   = 580 // room for the last time label, centred on its tick
	plotTop     = 10
	plotBottom  = 172 // time labels sit below, at chartHeight-8
	// valueTicks is how many intervals the value axis is cut into (at
	// most; nice numbers may give fewer).
	valueTicks = 4
	// maxTimeTicks bounds the time axis's labels so they never overlap at
	// phone width.
	maxTimeTicks = 6
)

// netSampleSeconds is the agent's sampling interval (docs/operations.md,
// "Agent": a sample every 5 s). netRxBytes and netTxBytes are bytes moved
// during one sample interval ("Telemetry"), so a mean divided by it is
// bytes per second.
const netSampleSeconds = 5

// unitKind says how a panel's values are written.
type unitKind int

const (
	unitPercent unitKind = iota
	unitBytes
	unitBytesPerSecond
	unitPlain
	unitCelsius
	unitWatts
)

// panel is one chart of the deployment page: a human title, the series
// drawn (by wire metric name), and optionally a "total" series drawn as a
// dashed ceiling whose value each point's title repeats ("used of total").
type panel struct {
	Title string
	// Lines are the metrics drawn as lines, with their legend names
	// ("" for a single line).
	Lines []panelLine
	// Total is the metric drawn as the dashed ceiling ("" for none).
	Total string
	Unit  unitKind
	// Fixed100 pins the value axis to 0-100 (percentages).
	Fixed100 bool
	// GPU panels are shown only when a GPU series has a point.
	GPU bool
}

type panelLine struct {
	Metric, Legend string
	// Scale divides each value (netSampleSeconds for network).
	Scale float64
}

// panels are the deployment page's charts, in the order of the
// DigitalOcean droplet graphs (docs/operations.md, "Console").
var panels = []panel{
	{Title: "CPU %", Lines: []panelLine{{Metric: "cpuPct"}}, Unit: unitPercent, Fixed100: true},
	{Title: "Memory used of total", Lines: []panelLine{{Metric: "memUsedBytes"}}, Total: "memTotalBytes", Unit: unitBytes},
	{Title: "Disk used of total (root filesystem)", Lines: []panelLine{{Metric: "diskUsedBytes"}}, Total: "diskTotalBytes", Unit: unitBytes},
	{Title: "Network in/out per second", Lines: []panelLine{{Metric: "netRxBytes", Legend: "in", Scale: netSampleSeconds},
		{Metric: "netTxBytes", Legend: "out", Scale: netSampleSeconds}}, Unit: unitBytesPerSecond},
	{Title: "Load (1-minute average)", Lines: []panelLine{{Metric: "load1"}}, Unit: unitPlain},
	{Title: "GPU utilisation % (busiest GPU)", Lines: []panelLine{{Metric: "gpuUtilPct"}}, Unit: unitPercent, Fixed100: true, GPU: true},
	{Title: "GPU memory used of total", Lines: []panelLine{{Metric: "gpuMemUsedBytes"}}, Total: "gpuMemTotalBytes", Unit: unitBytes, GPU: true},
	{Title: "GPU temperature °C (hottest GPU)", Lines: []panelLine{{Metric: "gpuTempC"}}, Unit: unitCelsius, GPU: true},
	{Title: "GPU power W (all GPUs)", Lines: []panelLine{{Metric: "gpuPowerW"}}, Unit: unitWatts, GPU: true},
}

// chartView is one panel as rendered: the inline SVG and a text summary
// that says the same without the picture (or colour).
type chartView struct {
	// Metric is the panel's first line's wire name (data-metric).
	Metric, Title string
	// Legend names the lines when there are several.
	Legend  []legendItem
	Points  int
	SVG     template.HTML
	Summary string
}

type legendItem struct {
	Class, Name string
}

// renderPanels draws the deployment page's charts from the performance
// series over [from, to) at step. GPU panels appear only when some GPU
// series has a point: a machine without a GPU shows none.
func renderPanels(series []adminapi.MetricSeries, from, to time.Time, step time.Duration) []chartView {
	by := map[string]adminapi.MetricSeries{}
	gpu := false
	for _, s := range series {
		by[s.Metric] = s
		if strings.HasPrefix(s.Metric, "gpu") && len(s.Points) > 0 {
			gpu = true
		}
	}
	var out []chartView
	for _, p := range panels {
		if p.GPU && !gpu {
			continue
		}
		out = append(out, renderPanel(p, by, from, to, step))
	}
	return out
}

// xy is one drawn point: its time and its (scaled) value.
type xy struct {
	T time.Time
	V float64
}

func pointsOf(s adminapi.MetricSeries, scale float64) []xy {
	out := make([]xy, len(s.Points))
	for i, p := range s.Points {
		v := p.Mean
		if scale > 0 {
			v /= scale
		}
		out[i] = xy{p.T, v}
	}
	return out
}

// renderPanel draws one panel: value grid and labels, time labels (UTC),
// each line as polylines broken at gaps longer than two steps, a dashed
// total, and every point as a dot (a zero-length path with a round cap:
// the fewest bytes) whose <title> is its time and value. Coordinates are
// whole user units, a fraction of a pixel at any width the page has.
// A point with no neighbour in its segment (a one-point series, say) is
// drawn visibly; the others show on hover. Only numbers and fixed words
// are written into the SVG.
func renderPanel(p panel, by map[string]adminapi.MetricSeries, from, to time.Time, step time.Duration) chartView {
	v := chartView{Metric: p.Lines[0].Metric, Title: p.Title}
	lines := make([][]xy, len(p.Lines))
	hi := 0.0
	for i, l := range p.Lines {
		lines[i] = pointsOf(by[l.Metric], l.Scale)
		for _, q := range lines[i] {
			hi = max(hi, q.V)
		}
		if l.Legend != "" {
			v.Legend = append(v.Legend, legendItem{Class: "s" + strconv.Itoa(i), Name: l.Legend})
		}
	}
	v.Points = len(lines[0])
	var total []xy
	totalAt := map[int64]float64{}
	if p.Total != "" {
		total = pointsOf(by[p.Total], 0)
		for _, q := range total {
			hi = max(hi, q.V)
			totalAt[q.T.UnixMilli()] = q.V
		}
	}
	top := niceTop(hi, p.Unit)
	if p.Unit == unitBytes || p.Unit == unitBytesPerSecond {
		top = max(top, valueTicks) // no fraction of a byte on the axis
	}
	if p.Fixed100 {
		top = 100
	}
	empty := v.Points == 0 && (len(lines) < 2 || len(lines[1]) == 0)
	span := to.Sub(from).Seconds()
	if span <= 0 {
		span = 1
	}
	x := func(t time.Time) float64 {
		f := t.Sub(from).Seconds() / span
		return plotLeft + max(0, min(1, f))*(plotRight-plotLeft)
	}
	y := func(val float64) float64 {
		return plotTop + (1-max(0, min(val, top))/top)*(plotBottom-plotTop)
	}

	var b strings.Builder
	b.Grow(1024 + 80*len(lines[0])*len(lines))
	label := template.HTMLEscapeString(p.Title)
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s" data-points="%d">`, chartWidth, chartHeight, label, v.Points)
	// Value axis: grid lines with their labels.
	b.WriteString(`<g class="yaxis">`)
	tick := top / valueTicks
	for i := 0; i <= valueTicks && !empty; i++ {
		val := tick * float64(i)
		yy := y(val)
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.0f" y2="%.0f"/><text x="%d" y="%.0f">%s</text>`,
			plotLeft, plotRight, yy, yy, plotLeft-6, yy+5, template.HTMLEscapeString(axisValue(val, p.Unit, tick)))
	}
	b.WriteString(`</g><g class="xaxis">`)
	fmt.Fprintf(&b, `<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d"/>`, plotLeft, plotRight, plotBottom, plotBottom)
	tstep, tfmt := timeTicks(to.Sub(from))
	for t := alignUp(from, tstep); t.Before(to) || t.Equal(to); t = t.Add(tstep) {
		xx := x(t)
		fmt.Fprintf(&b, `<line class="tick" x1="%.1f" x2="%.1f" y1="%d" y2="%d"/><text x="%.1f" y="%d">%s</text>`,
			xx, xx, plotBottom, plotBottom+4, xx, chartHeight-10, tickLabel(t, tfmt))
	}
	fmt.Fprintf(&b, `<text class="utc" x="4" y="%d">UTC</text></g>`, chartHeight-10)
	if empty {
		fmt.Fprintf(&b, `<text class="nodata" x="%d" y="%d">no data in this range</text></svg>`, (plotLeft+plotRight)/2, (plotTop+plotBottom)/2)
		v.SVG = template.HTML(b.String())
		v.Summary = "no data in this range"
		return v
	}
	if len(total) > 0 {
		b.WriteString(`<polyline class="total" points="`)
		for _, q := range total {
			fmt.Fprintf(&b, "%.0f,%.0f ", x(q.T), y(q.V))
		}
		b.WriteString(`"/>`)
	}
	tsFmt := pointTimeFormat(to.Sub(from))
	if tsFmt == "15:04" && !sameUTCDay(from, to) {
		// A range across midnight names each point's day.
		tsFmt = "Jan 2 15:04"
	}
	for i, pts := range lines {
		cls := "s" + strconv.Itoa(i)
		segs := segments(pts, step)
		for _, sg := range segs {
			if len(sg) < 2 {
				continue
			}
			fmt.Fprintf(&b, `<polyline class="line %s" points="`, cls)
			for _, q := range sg {
				fmt.Fprintf(&b, "%.0f,%.0f ", x(q.T), y(q.V))
			}
			b.WriteString(`"/>`)
		}
		fmt.Fprintf(&b, `<g class="pts %s">`, cls)
		name := ""
		if p.Lines[i].Legend != "" {
			name = p.Lines[i].Legend + " "
		}
		for _, sg := range segs {
			for _, q := range sg {
				solo := ""
				if len(sg) == 1 {
					solo = ` class="solo"`
				}
				val := pointValue(q.V, p.Unit)
				if tv, ok := totalAt[q.T.UnixMilli()]; ok {
					val += " of " + pointValue(tv, p.Unit)
				}
				fmt.Fprintf(&b, `<path%s d="M%.0f %.0fh0"><title>%s %s%s</title></path>`,
					solo, x(q.T), y(q.V), q.T.UTC().Format(tsFmt), name, template.HTMLEscapeString(val))
			}
		}
		b.WriteString(`</g>`)
	}
	b.WriteString(`</svg>`)
	v.SVG = template.HTML(b.String())
	v.Summary = summary(p, lines)
	return v
}

// segments cuts pts where two neighbours are more than two steps apart.
func segments(pts []xy, step time.Duration) [][]xy {
	var out [][]xy
	start := 0
	for i := 1; i <= len(pts); i++ {
		if i == len(pts) || (step > 0 && pts[i].T.Sub(pts[i-1].T) > 2*step) {
			out = append(out, pts[start:i])
			start = i
		}
	}
	return out
}

// summary states each line's lowest, highest, mean and last value in words.
func summary(p panel, lines [][]xy) string {
	var parts []string
	for i, pts := range lines {
		if len(pts) == 0 {
			continue
		}
		lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
		for _, q := range pts {
			lo, hi, sum = min(lo, q.V), max(hi, q.V), sum+q.V
		}
		s := fmt.Sprintf("%d %s; lowest %s, highest %s, mean %s, last %s", len(pts), pluralWord(len(pts), "point", "points"),
			pointValue(lo, p.Unit), pointValue(hi, p.Unit), pointValue(sum/float64(len(pts)), p.Unit), pointValue(pts[len(pts)-1].V, p.Unit))
		if l := p.Lines[i].Legend; l != "" {
			s = l + ": " + s
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// niceTop is where the value axis ends: valueTicks times the smallest 1,
// 2, 2.5 or 5 × 10^n at or above hi/valueTicks, so every label is round
// (for bytes, round in the IEC unit the labels use: 0.5 GiB, not 0.54);
// 1 for nothing.
func niceTop(hi float64, u unitKind) float64 {
	if hi <= 0 || math.IsNaN(hi) || math.IsInf(hi, 0) {
		return 1
	}
	div := 1.0
	if u == unitBytes || u == unitBytesPerSecond {
		for hi/div >= 1024 {
			div *= 1024
		}
	}
	return niceStep(hi/div/valueTicks) * valueTicks * div
}

// niceStep is the smallest 1, 2, 2.5 or 5 × 10^n at or above raw.
func niceStep(raw float64) float64 {
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw*(1-1e-9) {
			return m * mag
		}
	}
	return 10 * mag
}

// iec writes bytes with IEC prefixes (KiB, MiB, …), digits decimals.
func iec(b float64, digits int) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	for math.Abs(b) >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	if i == 0 {
		digits = 0
	}
	return strconv.FormatFloat(b, 'f', digits, 64) + " " + units[i]
}

// axisValue labels a value-axis tick; tick is the spacing, which decides
// the decimals a label needs.
func axisValue(v float64, u unitKind, tick float64) string {
	dec := 0
	for dec < 3 && math.Abs(tick*math.Pow(10, float64(dec))-math.Round(tick*math.Pow(10, float64(dec)))) > 1e-6 {
		dec++
	}
	switch u {
	case unitPercent:
		return strconv.FormatFloat(v, 'f', 0, 64) + "%"
	case unitBytes, unitBytesPerSecond:
		s := iec(v, 1)
		s = strings.Replace(s, ".0 ", " ", 1)
		if u == unitBytesPerSecond {
			s += "/s"
		}
		return s
	case unitCelsius:
		return strconv.FormatFloat(v, 'f', dec, 64) + " °C"
	case unitWatts:
		return strconv.FormatFloat(v, 'f', dec, 64) + " W"
	}
	return strconv.FormatFloat(v, 'f', dec, 64)
}

// pointValue writes one point's value with its unit.
func pointValue(v float64, u unitKind) string {
	switch u {
	case unitPercent:
		return strconv.FormatFloat(v, 'f', 1, 64) + "%"
	case unitBytes:
		return iec(v, 2)
	case unitBytesPerSecond:
		return iec(v, 1) + "/s"
	case unitCelsius:
		return strconv.FormatFloat(v, 'f', 1, 64) + " °C"
	case unitWatts:
		return strconv.FormatFloat(v, 'f', 1, 64) + " W"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// timeSteps are the time axis's candidate tick spacings.
var timeSteps = []time.Duration{time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 4 * time.Hour, 6 * time.Hour, 12 * time.Hour,
	24 * time.Hour, 2 * 24 * time.Hour, 7 * 24 * time.Hour}

// timeTicks picks the time axis's tick spacing for span (at most
// maxTimeTicks labels) and the labels' layout: clock time within a day,
// the date beyond.
func timeTicks(span time.Duration) (time.Duration, string) {
	step := timeSteps[len(timeSteps)-1]
	for _, s := range timeSteps {
		if span/s <= maxTimeTicks {
			step = s
			break
		}
	}
	if step >= 24*time.Hour {
		return step, "Jan 2"
	}
	if span > 24*time.Hour {
		return step, "Jan 2 15:04"
	}
	return step, "15:04"
}

// tickLabel is a time tick's label in layout; a clock-time label at UTC
// midnight is the date instead ("Mar 4"), so a 24-hour chart says which
// day its second half is.
func tickLabel(t time.Time, layout string) string {
	t = t.UTC()
	if layout == "15:04" && t.Hour() == 0 && t.Minute() == 0 {
		return t.Format("Jan 2")
	}
	return t.Format(layout)
}

// sameUTCDay says whether a and b fall on the same UTC date.
func sameUTCDay(a, b time.Time) bool {
	ay, am, ad := a.UTC().Date()
	by, bm, bd := b.UTC().Date()
	return ay == by && am == bm && ad == bd
}

// pluralWord is one when n is 1, else many ("1 point", "2 points").
func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// pointTimeFormat is how a point's <title> writes its time.
func pointTimeFormat(span time.Duration) string {
	if span > 24*time.Hour {
		return "Jan 2 15:04"
	}
	return "15:04"
}

// alignUp is t rounded up to a multiple of step from the Unix epoch (UTC
// midnight for whole days).
func alignUp(t time.Time, step time.Duration) time.Time {
	d := t.Truncate(step)
	if d.Before(t) {
		d = d.Add(step)
	}
	return d
}

// Sparkline geometry (the environment page's per-deployment CPU line).
const (
	sparkWidth  = 120
	sparkHeight = 28
)

// renderSpark draws a deployment's CPU % means over [from, to) as a small
// line on a fixed 0-100 scale, a lone point as a dot; its <title> states
// the mean, the peak and the last value.
func renderSpark(pts []xy, from, to time.Time, step time.Duration) template.HTML {
	if len(pts) == 0 {
		return template.HTML(`<span class="muted">no telemetry</span>`)
	}
	span := to.Sub(from).Seconds()
	x := func(t time.Time) float64 {
		return 1 + max(0, min(1, t.Sub(from).Seconds()/span))*(sparkWidth-2)
	}
	y := func(v float64) float64 { return 1 + (1-max(0, min(v, 100))/100)*(sparkHeight-2) }
	hi, sum := 0.0, 0.0
	for _, q := range pts {
		hi, sum = max(hi, q.V), sum+q.V
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="spark" viewBox="0 0 %d %d" role="img" aria-label="CPU %%" data-points="%d"><title>CPU %%: mean %s, peak %s, last %s</title>`,
		sparkWidth, sparkHeight, len(pts), pointValue(sum/float64(len(pts)), unitPercent), pointValue(hi, unitPercent), pointValue(pts[len(pts)-1].V, unitPercent))
	for _, sg := range segments(pts, step) {
		if len(sg) == 1 {
			fmt.Fprintf(&b, `<circle cx="%.0f" cy="%.0f" r="2"/>`, x(sg[0].T), y(sg[0].V))
			continue
		}
		b.WriteString(`<polyline points="`)
		for _, q := range sg {
			fmt.Fprintf(&b, "%.0f,%.0f ", x(q.T), y(q.V))
		}
		b.WriteString(`"/>`)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
