package digitalocean

import (
	"net/http"
	"strconv"
	"time"

	"github.com/digitalocean/godo"
)

// The API's budgets per token (docs/operations.md, "DigitalOcean API").
const (
	// HourlyBudget is the API's 5,000 requests per hour; RateLimit-Limit
	// and RateLimit-Remaining report it.
	HourlyBudget = 5000
	// MinuteBudget is the API's burst limit of 250 requests per minute,
	// which no header reports: the client counts its own requests in a
	// sliding minute and holds the 251st back.
	MinuteBudget = 250
	// MinBackoff is the pause after a 429 that names no usable reset
	// time: never zero, so a 429 can never turn into a tight loop.
	MinBackoff = time.Second
	// MaxBackoff caps a pause: the API's hourly window cannot ask for
	// more, so a later reset time is a wrong header, not a reason to stop
	// for a day.
	MaxBackoff = time.Hour
)

// Budget is a client's view of its token's budgets, for metrics and
// `chalupa admin` status.
type Budget struct {
	// Token is the client's token label.
	Token string
	// HourKnown is false until an answer carried RateLimit-* headers.
	HourKnown bool
	// HourLimit and HourRemaining are the last RateLimit-Limit and
	// RateLimit-Remaining seen (HourRemaining also counts requests sent
	// since), and HourReset the last RateLimit-Reset: when the oldest
	// request of the hour stops counting.
	HourLimit, HourRemaining int
	HourReset                time.Time
	// MinuteLimit is MinuteBudget; MinuteUsed the client's requests in the
	// last 60 s.
	MinuteLimit, MinuteUsed int
	// BlockedUntil is when calls are let through again after a 429 (zero
	// or past when they are).
	BlockedUntil time.Time
	// Requests counts requests sent, RateLimited the 429s received, and
	// HeldBack the calls refused locally without a request because a
	// budget was spent.
	Requests, RateLimited, HeldBack uint64
}

// Budget returns the current budget.
func (c *Client) Budget() Budget {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	c.pruneMinute(now)
	return Budget{
		Token: c.label, HourKnown: c.hourKnown, HourLimit: c.hourLimit, HourRemaining: c.hourLeft, HourReset: c.hourReset,
		MinuteLimit: MinuteBudget, MinuteUsed: len(c.minute), BlockedUntil: c.blockedUntil,
		Requests: c.requests, RateLimited: c.limited, HeldBack: c.heldBack,
	}
}

// pruneMinute drops requests older than a minute. Called with c.mu held.
func (c *Client) pruneMinute(now time.Time) {
	cut := 0
	for cut < len(c.minute) && !c.minute[cut].After(now.Add(-time.Minute)) {
		cut++
	}
	c.minute = c.minute[cut:]
}

// reserve admits one request, or refuses it with ErrRateLimited while the
// token is blocked after a 429, its minute budget is spent, or the last
// answer said the hour's budget is spent and its reset has not come.
func (c *Client) reserve(op string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	c.pruneMinute(now)
	var until time.Time
	switch {
	case now.Before(c.blockedUntil):
		until = c.blockedUntil
	case len(c.minute) >= MinuteBudget:
		until = c.minute[0].Add(time.Minute)
	case c.hourKnown && c.hourLeft <= 0 && now.Before(c.hourReset):
		until = c.hourReset
	}
	if !until.IsZero() {
		c.heldBack++
		return &Error{Op: op, Token: c.label, Kind: ErrRateLimited, RetryAt: until, Reason: "budget spent; no request sent"}
	}
	c.minute = append(c.minute, now)
	c.requests++
	if c.hourKnown && c.hourLeft > 0 {
		c.hourLeft--
	}
	return nil
}

// observe records the rate headers of an answer and, on a 429, blocks the
// client until the reset: Retry-After when the API sent one (even when
// RateLimit-Reset is later), else RateLimit-Reset when the hour is spent,
// else MinBackoff; at most MaxBackoff.
func (c *Client) observe(op string, resp *godo.Response) {
	if resp == nil || resp.Response == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if resp.Rate.Limit > 0 {
		c.hourKnown = true
		c.hourLimit, c.hourLeft = resp.Rate.Limit, resp.Rate.Remaining
		c.hourReset = resp.Rate.Reset.Time
	}
	if resp.StatusCode != http.StatusTooManyRequests {
		return
	}
	c.limited++
	var until time.Time
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		// The provider said when to come back: that wins over the
		// window's reset, even with the hour spent, so one 429 does not
		// freeze the token for up to an hour; the spent hour's gate in
		// reserve opens then too (docs/operations.md, "DigitalOcean API").
		until = now.Add(time.Duration(secs) * time.Second)
		if c.hourKnown && c.hourLeft <= 0 && c.hourReset.After(until) {
			c.hourReset = until
		}
	} else if c.hourKnown && c.hourLeft <= 0 && c.hourReset.After(until) {
		until = c.hourReset
	}
	until = later(until, now.Add(MinBackoff))
	until = earlier(until, now.Add(MaxBackoff))
	if until.After(c.blockedUntil) {
		c.blockedUntil = until
	}
	c.log.Warn().Str("op", op).Time("retry_at", c.blockedUntil).
		Msg("DigitalOcean rate-limited this token; no request is sent with it before retry_at")
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
