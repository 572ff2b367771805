package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/chalupa-run/chalupa/protocol"
)

// Verdict is what an answer to a spooled record means for it.
type Verdict int

// Verdicts of Classify.
const (
	// Delivered: a 2xx; the record leaves the spool.
	Delivered Verdict = iota
	// Drop: a refusal of the record itself; it leaves the spool, counted
	// under the outcome's Reason.
	Drop
	// Retry: transient (5xx, 429, a transport error) or not the record's
	// fault (401: key or clock; 404 deployment_not_found: the first
	// heartbeat creates the deployment); the record stays and the spool
	// pauses for the back-off.
	Retry
)

// Outcome is Classify's answer.
type Outcome struct {
	// Verdict is what happens to the record.
	Verdict Verdict
	// Reason is the drop reason (Verdict Drop).
	Reason DropReason
	// RetryAfter is the server's Retry-After, when it sent one.
	RetryAfter time.Duration
	// Code is the error code of a refusal, for the log.
	Code string
}

// Classify maps an answer to a spooled record to its outcome
// (docs/operations.md, "Agent"). status 0 means no answer (a transport
// error).
func Classify(status int, header http.Header, body []byte) Outcome {
	code := errorCode(body)
	ra := retryAfter(header)
	switch {
	case status == 0:
		return Outcome{Verdict: Retry}
	case status/100 == 2:
		return Outcome{Verdict: Delivered}
	case status == http.StatusTooManyRequests, status/100 == 5, status == http.StatusRequestTimeout:
		return Outcome{Verdict: Retry, RetryAfter: ra, Code: code}
	case status == http.StatusUnauthorized:
		// unknown_key, key_revoked, timestamp_skew…: the key file or the
		// clock needs fixing, and the record is still good.
		return Outcome{Verdict: Retry, RetryAfter: ra, Code: code}
	case status == http.StatusNotFound && code == "deployment_not_found":
		return Outcome{Verdict: Retry, RetryAfter: ra, Code: code}
	case status == http.StatusConflict && code == "nonce_replayed":
		// Each attempt has a fresh nonce; a collision is retried.
		return Outcome{Verdict: Retry, Code: code}
	case status == http.StatusConflict && (code == "window_conflict" || code == "event_conflict" || code == "run_conflict"):
		return Outcome{Verdict: Drop, Reason: DropConflict, Code: code}
	case status == http.StatusConflict && code == "deployment_ended":
		return Outcome{Verdict: Drop, Reason: DropDeploymentEnded, Code: code}
	case status == http.StatusUnprocessableEntity && code == "window_too_old":
		return Outcome{Verdict: Drop, Reason: DropTooOld, Code: code}
	default:
		return Outcome{Verdict: Drop, Reason: DropRefused, Code: code}
	}
}

// errorCode reads the code of an error body {"error":{"code":…}}.
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	return e.Error.Code
}

// retryAfter reads a Retry-After of delay-seconds (the form chalupa sends).
func retryAfter(h http.Header) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0
	}
	return min(time.Duration(n)*time.Second, RetryAfterMax)
}

// Deliverer sends the spool's records in order, paced at ReplayRate, each
// with a fresh signature over its unchanged body, and removes a record only
// after a 2xx (docs/operations.md, "Agent").
type Deliverer struct {
	spool  *Spool
	client *protocol.Client
	clock  clockwork.Clock
	log    zerolog.Logger
	state  *stateFile
	limit  *rate.Limiter

	mu       sync.Mutex
	backoff  time.Duration
	notUntil time.Time
	wake     chan struct{}
}

func newDeliverer(sp *Spool, cl *protocol.Client, clock clockwork.Clock, log zerolog.Logger, st *stateFile, pace rate.Limit) *Deliverer {
	if pace == 0 {
		pace = ReplayRate
	}
	return &Deliverer{spool: sp, client: cl, clock: clock, log: log, state: st,
		limit: rate.NewLimiter(pace, 1), wake: make(chan struct{}, 1)}
}

// Wake asks the delivery loop to look at the spool (a record was appended).
func (d *Deliverer) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// NotUntil is when the back-off after a failure ends (zero: none).
func (d *Deliverer) NotUntil() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.notUntil
}

// PassResult is what one Pass did.
type PassResult struct {
	// Sent counts requests sent; Delivered and Dropped the records that
	// left the spool.
	Sent, Delivered, Dropped int
	// Paused is true when the pass stopped at a record to retry later.
	Paused bool
	// PausedCode is the error code of the 4xx answer the pass paused at
	// ("" for no answer, a 5xx or a 429).
	PausedCode string
}

// Pass walks the spool in order once: records past their DropAfter are
// dropped unsent; every other record is sent (paced) and then delivered,
// dropped, or — on a retry verdict — kept, and the pass stops there, so
// order holds and a failing control plane is not hammered. A pass inside
// the back-off sends nothing. It returns when the spool is empty, at a
// retry, or when ctx ends.
func (d *Deliverer) Pass(ctx context.Context) PassResult {
	var res PassResult
	if now := d.clock.Now(); now.Before(d.NotUntil()) {
		res.Paused = true
		return res
	}
	for _, r := range d.spool.List() {
		if ctx.Err() != nil {
			return res
		}
		if !r.DropAfter.IsZero() && !d.clock.Now().Before(r.DropAfter) {
			d.dropRecord(r, DropTooOld, "")
			res.Dropped++
			continue
		}
		if err := d.pace(ctx); err != nil {
			return res
		}
		body, err := d.spool.Body(r)
		if err != nil {
			d.dropRecord(r, DropCorrupt, "")
			res.Dropped++
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, RequestTimeout)
		resp, err := d.client.Post(rctx, r.Route, body)
		cancel()
		res.Sent++
		var out Outcome
		if err != nil || resp == nil {
			out = Classify(0, nil, nil)
		} else {
			out = Classify(resp.Status, resp.Header, resp.Body)
		}
		switch out.Verdict {
		case Delivered:
			if err := d.spool.Remove(r.Seq); err != nil {
				d.log.Warn().Err(err).Msg("spool: remove a delivered record")
			}
			now := d.clock.Now().UTC()
			_ = d.state.update(func(s *State) { s.LastDeliveryAt = now; s.Delivered++ })
			d.mu.Lock()
			d.backoff, d.notUntil = 0, time.Time{}
			d.mu.Unlock()
			res.Delivered++
		case Drop:
			d.dropRecord(r, out.Reason, out.Code)
			res.Dropped++
		case Retry:
			d.pause(out.RetryAfter)
			status := 0
			if resp != nil {
				status = resp.Status
			}
			if status/100 == 4 && status != http.StatusTooManyRequests && status != http.StatusRequestTimeout {
				res.PausedCode = out.Code
			}
			d.log.Info().Str("kind", r.Kind).Int("status", status).Str("code", out.Code).Time("retryAt", d.NotUntil()).Msg("delivery paused")
			res.Paused = true
			return res
		}
	}
	return res
}

// pace waits for the replay rate limiter on the injected clock.
func (d *Deliverer) pace(ctx context.Context) error {
	rv := d.limit.ReserveN(d.clock.Now(), 1)
	wait := rv.DelayFrom(d.clock.Now())
	if wait <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		rv.CancelAt(d.clock.Now())
		return ctx.Err()
	case <-d.clock.After(wait):
		return nil
	}
}

// pause sets the back-off: doubled from RetryMin to RetryMax, or the
// server's Retry-After when longer.
func (d *Deliverer) pause(retryAfter time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.backoff == 0 {
		d.backoff = RetryMin
	} else {
		d.backoff = min(2*d.backoff, RetryMax)
	}
	d.notUntil = d.clock.Now().Add(max(d.backoff, retryAfter))
}

func (d *Deliverer) dropRecord(r Record, reason DropReason, code string) {
	if err := d.spool.Remove(r.Seq); err != nil {
		d.log.Warn().Err(err).Msg("spool: remove a dropped record")
	}
	d.countDrop(reason, r, code)
}

func (d *Deliverer) countDrop(reason DropReason, r Record, code string) {
	_ = d.state.update(func(s *State) { s.Dropped[reason]++ })
	ev := d.log.Warn()
	if reason == DropConflict {
		ev = d.log.Error()
	}
	ev.Str("kind", r.Kind).Str("reason", string(reason)).Str("code", code).Time("created", r.Created).Msg("spooled record dropped")
}

// Run delivers until ctx ends: a pass whenever a record is appended, and
// again when a back-off ends.
func (d *Deliverer) Run(ctx context.Context) {
	for {
		res := d.Pass(ctx)
		var timer <-chan time.Time
		if n, _ := d.spool.Depth(); n > 0 && res.Paused {
			wait := d.NotUntil().Sub(d.clock.Now())
			timer = d.clock.After(max(wait, 0))
		}
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-timer:
		}
	}
}
