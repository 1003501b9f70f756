package aws

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"kiln.dev/kiln/internal/atomicfile"
)

// State is everything the local AWS holds, by service; it is what the
// state file keeps (JSON).
type State struct {
	EC2 *ec2State `json:"ec2"`
	ELB *elbState `json:"elasticloadbalancing"`
	ASG *asgState `json:"autoscaling"`
	IAM *iamState `json:"iam"`
	S3  *s3State  `json:"s3"`
}

// fill makes the parts a state file from an older local AWS lacks.
func (st *State) fill() {
	if st.EC2 == nil {
		st.EC2 = newEC2State()
	}
	if st.ELB == nil {
		st.ELB = newELBState()
	}
	if st.ASG == nil {
		st.ASG = newASGState()
	}
	if st.IAM == nil {
		st.IAM = newIAMState()
	}
	if st.S3 == nil {
		st.S3 = newS3State()
	}
}

// loadState reads the state file; a missing file (or path "") is an empty
// state.
func loadState(path string) (*State, error) {
	st := &State{}
	if path != "" {
		b, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("local aws: read state: %w", err)
		default:
			if err := json.Unmarshal(b, st); err != nil {
				return nil, fmt.Errorf("local aws: state file %s: %w", path, err)
			}
		}
	}
	st.fill()
	return st, nil
}

// save writes the state file whole (a temporary file renamed over it), so
// a crash leaves the old state or the new one. Callers hold s.mu.
func (s *Server) save() error {
	if s.opts.StatePath == "" {
		return nil
	}
	return atomicfile.WriteJSON(s.opts.StatePath, s.st, 0o600)
}

// Duration is a time.Duration written as "1.5s" in JSON (faults, state).
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}
