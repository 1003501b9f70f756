package daemon

import "fmt"

// FlagError is a setting of kilnd's that cannot work: Flag names it as
// kilnd's command line does (--listen), Value is what it was given ("" when
// the message quotes none); the message says why.
type FlagError struct {
	Flag  string
	Value string
	Err   error
}

func (e *FlagError) Error() string { return e.Err.Error() }
func (e *FlagError) Unwrap() error { return e.Err }

// flagError is a *FlagError of flag, given value, whose message is format's.
func flagError(flag, value, format string, args ...any) error {
	return &FlagError{Flag: flag, Value: value, Err: fmt.Errorf(format, args...)}
}
