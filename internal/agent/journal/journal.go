// Package journal is the agent's record of the instructions it ran, in its
// data dir, one file per instruction written atomically: started (before it
// runs), its result (after), acknowledged (once the controller recorded the
// result). An instruction with a result is never run again, its result is
// sent until acknowledged; one started without a result (the agent crashed
// mid-way) runs again: instructions are idempotent.
package journal

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"kiln.dev/kiln/internal/atomicfile"

	v1 "kiln.dev/kiln/api/v1"
)

// Dir is the journal's directory under the data dir.
const Dir = "journal"

// Entry is what the journal knows of one instruction.
type Entry struct {
	ID       string                `json:"id"`
	Kind     string                `json:"kind"`
	Started  time.Time             `json:"started"`
	Attempts int                   `json:"attempts"` // runs started, including after crashes
	Result   *v1.InstructionResult `json:"result,omitempty"`
	Finished *time.Time            `json:"finished,omitempty"`
	Acked    *time.Time            `json:"acked,omitempty"`
}

// Journal is safe for concurrent use.
type Journal struct {
	dir string
	now func() time.Time
	mu  sync.Mutex
}

// Open opens (creating) the journal in dataDir. now is the clock; time.Now
// when nil.
func Open(dataDir string, now func() time.Time) (*Journal, error) {
	dir := filepath.Join(dataDir, Dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	return &Journal{dir: dir, now: now}, nil
}

func (j *Journal) path(id string) string {
	// Ids come from the controller: encode them so none names another path.
	return filepath.Join(j.dir, hex.EncodeToString([]byte(id))+".json")
}

// Get returns the entry of id, if any.
func (j *Journal) Get(id string) (Entry, bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.get(id)
}

func (j *Journal) get(id string) (Entry, bool, error) {
	data, err := os.ReadFile(j.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return Entry{}, false, nil
	} else if err != nil {
		return Entry{}, false, fmt.Errorf("read journal entry %s: %w", id, err)
	}
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return Entry{}, false, fmt.Errorf("read journal entry %s: %w", id, err)
	}
	return e, true, nil
}

func (j *Journal) put(e Entry) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(j.path(e.ID), data, 0o600); err != nil {
		return fmt.Errorf("write journal entry %s: %w", e.ID, err)
	}
	return nil
}

// Start records that instruction in starts running (again). It is durable
// when Start returns.
func (j *Journal) Start(in v1.Instruction) (Entry, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, _, err := j.get(in.ID)
	if err != nil {
		return Entry{}, err
	}
	if e.Result != nil {
		return e, fmt.Errorf("instruction %s has a result: it does not run again", in.ID)
	}
	e.ID, e.Kind, e.Started = in.ID, in.Kind, j.now().UTC()
	e.Attempts++
	return e, j.put(e)
}

// Finish records the result of a started instruction.
func (j *Journal) Finish(r v1.InstructionResult) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok, err := j.get(r.Instruction)
	if err != nil {
		return err
	}
	if !ok {
		e.ID = r.Instruction
	}
	t := j.now().UTC()
	e.Result, e.Finished = &r, &t
	return j.put(e)
}

// Ack records that the controller recorded the result of id.
func (j *Journal) Ack(id string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok, err := j.get(id)
	if err != nil || !ok || e.Acked != nil {
		return err
	}
	t := j.now().UTC()
	e.Acked = &t
	return j.put(e)
}

// Unacked returns the results not acknowledged yet, oldest first.
func (j *Journal) Unacked() ([]v1.InstructionResult, error) {
	entries, err := j.All()
	if err != nil {
		return nil, err
	}
	var out []v1.InstructionResult
	for _, e := range entries {
		if e.Result != nil && e.Acked == nil {
			out = append(out, *e.Result)
		}
	}
	return out, nil
}

// All returns every entry, oldest start first.
func (j *Journal) All() ([]Entry, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	files, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	var out []Entry
	for _, f := range files {
		name, ok := strings.CutSuffix(f.Name(), ".json")
		if !ok || strings.HasPrefix(name, ".") {
			continue
		}
		id, err := hex.DecodeString(name)
		if err != nil {
			continue
		}
		e, ok, err := j.get(string(id))
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Started.Before(out[b].Started) })
	return out, nil
}

// Prune forgets entries acknowledged before t.
func (j *Journal) Prune(t time.Time) error {
	entries, err := j.All()
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range entries {
		if e.Acked != nil && e.Acked.Before(t) {
			if err := os.Remove(j.path(e.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("prune journal entry %s: %w", e.ID, err)
			}
		}
	}
	return nil
}
