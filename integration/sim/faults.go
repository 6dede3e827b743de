package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// faultState holds the live fault settings and their random source.
type faultState struct {
	mu  sync.Mutex
	f   Faults
	rng *rand.Rand

	errors atomic.Uint64 // injected HTTP 500s
	spikes atomic.Uint64 // injected latency spikes
}

func newFaultState(f Faults, seed uint64) *faultState {
	return &faultState{f: f, rng: rand.New(rand.NewPCG(seed, 0x6b766d657368))}
}

func (fs *faultState) get() Faults {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.f
}

func (fs *faultState) set(f Faults) {
	fs.mu.Lock()
	fs.f = f
	fs.mu.Unlock()
}

// roll decides whether a request fails and how long a spike holds it back
// (simulated time; 0 = no spike).
func (fs *faultState) roll() (fail bool, spike time.Duration) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.f.ErrorRate > 0 && fs.rng.Float64() < fs.f.ErrorRate {
		fs.errors.Add(1)
		return true, 0
	}
	if fs.f.SpikeRate > 0 && fs.f.SpikeDelay > 0 && fs.rng.Float64() < fs.f.SpikeRate {
		fs.spikes.Add(1)
		return false, fs.f.SpikeDelay
	}
	return false, 0
}

// SetFaults replaces the instance's fault settings.
func (in *Instance) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	in.faults.set(f)
	in.log.Info().Float64("error_rate", f.ErrorRate).Float64("spike_rate", f.SpikeRate).
		Dur("spike_delay_sim", f.SpikeDelay).Dur("restart_downtime_sim", f.RestartDowntime).Msg("faults set")
	return nil
}

// Faults returns the current fault settings.
func (in *Instance) Faults() Faults { return in.faults.get() }

// Restart simulates a crash and restart: every running and waiting request
// fails, the cache is emptied, and for Faults.RestartDowntime (simulated)
// /health answers 503 and new requests are refused. It reports false if a
// restart was already pending.
func (in *Instance) Restart() bool {
	return in.eng.restart(in.faults.get().RestartDowntime)
}

// Restarting reports whether a simulated restart is in progress.
func (in *Instance) Restarting() bool { return in.eng.isDown() }

// faultUpdate is the body of POST /sim/fault. Absent fields keep their
// value; durations are in simulated seconds.
type faultUpdate struct {
	ErrorRate        *float64 `json:"error_rate"`
	SpikeRate        *float64 `json:"spike_rate"`
	SpikeDelayS      *float64 `json:"spike_delay_s"`
	RestartDowntimeS *float64 `json:"restart_downtime_s"`
	Restart          bool     `json:"restart"`
}

// faultStatus is the reply of /sim/fault.
type faultStatus struct {
	ErrorRate        float64 `json:"error_rate"`
	SpikeRate        float64 `json:"spike_rate"`
	SpikeDelayS      float64 `json:"spike_delay_s"`
	RestartDowntimeS float64 `json:"restart_downtime_s"`
	Restarting       bool    `json:"restarting"`
	InjectedErrors   uint64  `json:"injected_errors"`
	InjectedSpikes   uint64  `json:"injected_spikes"`
	Restarts         uint64  `json:"restarts"`
}

// maxFaultSeconds bounds durations set over HTTP (a day of simulated time).
const maxFaultSeconds = 86400

// decodeFaultUpdate parses a /sim/fault body strictly: one JSON object, known
// fields only.
func decodeFaultUpdate(body []byte) (faultUpdate, error) {
	var u faultUpdate
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&u); err != nil {
		return u, fmt.Errorf("malformed fault update: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return u, errors.New("malformed fault update: trailing data after the JSON object")
	}
	return u, nil
}

// applyTo returns f with the update applied, validated.
func (u faultUpdate) applyTo(f Faults) (Faults, error) {
	dur := func(name string, s *float64, d *time.Duration) error {
		if s == nil {
			return nil
		}
		if math.IsNaN(*s) || *s < 0 || *s > maxFaultSeconds {
			return fmt.Errorf("%s must be in [0, %d] seconds, got %v", name, maxFaultSeconds, *s)
		}
		*d = time.Duration(*s * float64(time.Second))
		return nil
	}
	if u.ErrorRate != nil {
		f.ErrorRate = *u.ErrorRate
	}
	if u.SpikeRate != nil {
		f.SpikeRate = *u.SpikeRate
	}
	if err := dur("spike_delay_s", u.SpikeDelayS, &f.SpikeDelay); err != nil {
		return f, err
	}
	if err := dur("restart_downtime_s", u.RestartDowntimeS, &f.RestartDowntime); err != nil {
		return f, err
	}
	return f, f.Validate()
}

func (in *Instance) faultStatus() faultStatus {
	f := in.faults.get()
	return faultStatus{
		ErrorRate:        f.ErrorRate,
		SpikeRate:        f.SpikeRate,
		SpikeDelayS:      f.SpikeDelay.Seconds(),
		RestartDowntimeS: f.RestartDowntime.Seconds(),
		Restarting:       in.eng.isDown(),
		InjectedErrors:   in.faults.errors.Load(),
		InjectedSpikes:   in.faults.spikes.Load(),
		Restarts:         in.eng.ctr.restarts.Load(),
	}
}

// handleFault serves GET /sim/fault (current settings) and POST /sim/fault
// (partial update, optionally {"restart": true}).
func (in *Instance) handleFault(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		body, aerr := readBody(w, r, 1<<20)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		u, err := decodeFaultUpdate(body.Bytes())
		putBody(body)
		if err != nil {
			writeError(w, badRequest("", "%v", err))
			return
		}
		f, err := u.applyTo(in.faults.get())
		if err != nil {
			writeError(w, badRequest("", "%v", err))
			return
		}
		if err := in.SetFaults(f); err != nil {
			writeError(w, badRequest("", "%v", err))
			return
		}
		if u.Restart {
			in.Restart()
		}
	}
	writeJSON(w, http.StatusOK, in.faultStatus())
}
