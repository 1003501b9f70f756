package gateway

import (
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/coder/websocket"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// Instructions travel to the agent once per session (on connect, when
// Notify wakes the session, at every poll); results come back once into the
// store and are acknowledged, also when they were recorded already.
// A wake and a poll both check the session's certificate first.

func (s *session) result(r *v1.InstructionResult) error {
	err := s.g.st.SetInstructionResult(s.ctx, r.Instruction, *r)
	switch {
	case err == nil:
		s.log.Info("instruction result recorded", "instruction", r.Instruction, "state", r.State)
	case errors.Is(err, store.ErrExists):
		s.log.Info("instruction result already recorded", "instruction", r.Instruction)
	case errors.Is(err, store.ErrNotFound):
		// The instruction is gone (its cluster was deleted): the agent
		// may forget it.
		s.log.Warn("result of an unknown instruction", "instruction", r.Instruction)
	default:
		return err
	}
	return s.send(&v1.ControllerMessage{Type: v1.ControllerAck, Ack: r.Instruction})
}

// The sending side of a session has no goroutine of its own (an idle
// session holds one goroutine, its reader): a cycle runs on a short-lived
// goroutine when the session opens, when Notify wakes it and when its poll
// timer fires; one cycle at a time, and a wake during a cycle runs one more.
// A cycle checks the session's certificate (all but the first) and sends
// the node's pending instructions. Buffered log lines are flushed by a
// timer logFlushEvery after the first one came.

// sending is the state of a session's sending side, under mu.
type sending struct {
	mu      sync.Mutex
	stopped bool
	cycling bool // a cycle runs
	again   bool // woken while a cycle ran: one more
	poll    *time.Timer
	flush   *time.Timer // made at the first buffered log line
	running sync.WaitGroup

	// Owned by the cycle that runs.
	checked bool            // the first cycle ran: the next ones check the certificate
	sent    map[string]bool // instructions sent on this session
}

// startSending runs the first cycle and arms the poll timer.
func (s *session) startSending() {
	s.snd.sent = map[string]bool{}
	s.snd.mu.Lock()
	s.snd.poll = time.AfterFunc(s.g.sessionPoll(), s.notify)
	s.snd.mu.Unlock()
	s.notify()
}

// stopSending stops the timers and waits for a cycle or a flush that
// runs.
func (s *session) stopSending() {
	s.snd.mu.Lock()
	s.snd.stopped = true
	if s.snd.poll != nil {
		s.snd.poll.Stop()
	}
	if s.snd.flush != nil {
		s.snd.flush.Stop()
	}
	s.snd.mu.Unlock()
	s.snd.running.Wait()
}

// notify runs a cycle now, or one more after the one that runs.
func (s *session) notify() {
	s.snd.mu.Lock()
	defer s.snd.mu.Unlock()
	switch {
	case s.snd.stopped, s.snd.poll == nil:
		// Not started: the first cycle, when it starts, sends what is
		// pending then.
	case s.snd.cycling:
		s.snd.again = true
	default:
		s.snd.cycling = true
		s.snd.running.Add(1)
		go s.cycle()
	}
}

// cycle runs cycles until no wake is left, then arms the poll timer.
func (s *session) cycle() {
	defer s.snd.running.Done()
	for {
		ok := s.cycleOnce()
		s.snd.mu.Lock()
		if ok && s.snd.again && !s.snd.stopped {
			s.snd.again = false
			s.snd.mu.Unlock()
			continue
		}
		s.snd.cycling = false
		if ok && !s.snd.stopped {
			s.snd.poll.Reset(s.g.sessionPoll())
		}
		s.snd.mu.Unlock()
		return
	}
}

// cycleOnce checks the certificate (but on the first cycle) and sends the
// pending instructions; false when the session ends.
func (s *session) cycleOnce() bool {
	if s.snd.checked && !s.checkCertificate() {
		return false
	}
	s.snd.checked = true
	if err := s.sendPending(s.snd.sent); err != nil {
		if s.ctx.Err() == nil {
			s.log.Warn("send instructions", "err", err)
			s.conn.Close(websocket.StatusTryAgainLater, "the controller could not send instructions")
		}
		return false
	}
	return true
}

// logBuffered arms the flush timer: the first log line is buffered.
func (s *session) logBuffered() {
	s.snd.mu.Lock()
	defer s.snd.mu.Unlock()
	switch {
	case s.snd.stopped:
	case s.snd.flush == nil:
		s.snd.flush = time.AfterFunc(logFlushEvery, s.flushTimer)
	default:
		s.snd.flush.Reset(logFlushEvery)
	}
}

// flushTimer flushes the buffered log lines (the flush timer's function).
func (s *session) flushTimer() {
	s.snd.mu.Lock()
	if s.snd.stopped {
		s.snd.mu.Unlock()
		return
	}
	s.snd.running.Add(1)
	s.snd.mu.Unlock()
	defer s.snd.running.Done()
	s.flushLogs(s.ctx)
}

func (s *session) sendPending(sent map[string]bool) error {
	pending, err := s.g.st.ListInstructions(s.ctx, s.k, s.node, true)
	if err != nil {
		return err
	}
	for _, in := range pending {
		if sent[in.ID] {
			continue
		}
		s.log.Info("sending instruction", "instruction", in.ID, "kind", in.Kind)
		if err := s.send(&v1.ControllerMessage{Type: v1.ControllerInstruction, Instruction: &in.Instruction}); err != nil {
			return err
		}
		sent[in.ID] = true
	}
	return nil
}

// sessionPoll is the time to a session's next poll: PollInterval, or
// longer when the gateway holds so many sessions that polling each every
// PollInterval would pass MaxSessionPolls a second; with a tenth either way
// at random, so that sessions opened together do not poll together.
func (g *Gateway) sessionPoll() time.Duration {
	g.mu.Lock()
	n := len(g.sessions)
	g.mu.Unlock()
	d := max(g.opts.PollInterval, time.Duration(n)*time.Second/MaxSessionPolls)
	return d - d/10 + rand.N(d/5+1)
}
