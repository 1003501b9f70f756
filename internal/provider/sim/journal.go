package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"kiln.dev/kiln/internal/provider"
)

// JournalEntry is one step attempt as the sim saw it: from the start of its
// BeforeStep hook (where step latency is spent) to the end.
type JournalEntry struct {
	PID     int       `json:"pid"`
	Cluster string    `json:"cluster"` // project/name
	Step    string    `json:"step"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
}

// WithJournal appends a JSON line per step attempt to the file at path
// (created if missing), so tests can see which process ran which step when,
// across processes and crashes.
func WithJournal(path string) Option {
	return func(s *Sim) { s.journal = &journal{path: path} }
}

type journal struct {
	path string
	mu   sync.Mutex
}

func (j *journal) record(c provider.Cluster, step string, start time.Time) error {
	b, err := json.Marshal(JournalEntry{PID: os.Getpid(), Cluster: key(c), Step: step, Start: start, End: time.Now()})
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("sim journal: %w", err)
	}
	_, werr := f.Write(append(b, '\n')) // one write with O_APPEND: lines from processes never interleave
	return errors.Join(werr, f.Close())
}
