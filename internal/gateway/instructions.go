package gateway

import (
	"errors"
	"math/rand/v2"
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

// sender sends the node's pending instructions at once, when woken by
// Notify and at every poll, and flushes buffered log lines logFlushEvery
// after the first one came. It sleeps on two timers, not tickers: an idle
// session costs nothing between its polls.
func (s *session) sender() {
	poll := time.NewTimer(s.g.sessionPoll())
	defer poll.Stop()
	flush := time.NewTimer(logFlushEvery)
	flush.Stop()
	defer flush.Stop()
	sent := map[string]bool{}
	for {
		var err error
		if offload(func() { err = s.sendPending(sent) }); err != nil {
			if s.ctx.Err() == nil {
				s.log.Warn("send instructions", "err", err)
				s.conn.Close(websocket.StatusTryAgainLater, "the controller could not send instructions")
			}
			return
		}
	wait:
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-s.logged:
				flush.Reset(logFlushEvery)
			case <-flush.C:
				offload(func() { s.flushLogs(s.ctx) })
			case <-s.wake:
				break wait
			case <-poll.C:
				poll.Reset(s.g.sessionPoll())
				break wait
			}
		}
		ok := true
		if offload(func() { ok = s.checkCertificate() }); !ok {
			return
		}
	}
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
