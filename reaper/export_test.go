package reaper

// IdleWaits is how many times Run waited without a timer.
func (r *Reaper) IdleWaits() int64 { return r.idleWaits.Load() }
