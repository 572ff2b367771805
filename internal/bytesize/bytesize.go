// Package bytesize writes byte counts for people: binary units with one
// decimal, the form the CLI and the console show storage in
// (docs/operations.md, "Quotas").
package bytesize

import "fmt"

// Format is n bytes as "512 B", "1.5 KiB", "4.0 GiB" (binary units up to
// PiB, one decimal).
func Format(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// Budget is used bytes against a budget: "1.5 MiB / 4.0 GiB (0%)", or
// "1.5 MiB / unlimited" when budget is 0 or less.
func Budget(used, budget int64) string {
	if budget <= 0 {
		return Format(used) + " / unlimited"
	}
	return fmt.Sprintf("%s / %s (%d%%)", Format(used), Format(budget), used*100/budget)
}

// Signed is a change of n bytes with its sign, in Format's units: "+1.5 MiB",
// "-512 B", "+0 B" (the operations report's growth figures,
// docs/operations.md "Operations report").
func Signed(n int64) string {
	if n < 0 {
		if n == -n { // math.MinInt64 has no positive twin
			return "-8192.0 PiB"
		}
		return "-" + Format(-n)
	}
	return "+" + Format(n)
}

// PerSecond is a rate of bytesPerSecond in Format's units with "/s":
// "1.5 KiB/s", "0 B/s" below one byte (fractions are dropped; negative
// rates are written as 0, which a counter's delta never is).
func PerSecond(bytesPerSecond float64) string {
	if !(bytesPerSecond >= 1) { // NaN and fractions too
		return "0 B/s"
	}
	if bytesPerSecond > float64(1<<62) {
		bytesPerSecond = float64(1 << 62)
	}
	return Format(int64(bytesPerSecond)) + "/s"
}
