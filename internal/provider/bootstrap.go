package provider

import (
	"encoding/json"
	"fmt"
)

// Files are the machine's join files, the agent's --credentials (JSON) and
// --passphrase, with controller, when set, as the address the machine
// reaches the agent gateway at instead of the one the credential names.
// A nil b is refused, naming the machine: the runner had no bootstrap
// data to hand (a kilnd that serves no agent gateway).
func (b *Bootstrap) Files(machine, controller string) (credentials, passphrase []byte, err error) {
	if b == nil {
		return nil, nil, fmt.Errorf("machine %s came without bootstrap data: the kilnd running the plan serves no agent gateway (run it with --role all)", machine)
	}
	creds := b.Credentials
	if controller != "" {
		creds.Controller = controller
	}
	c, err := json.MarshalIndent(creds, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	return append(c, '\n'), []byte(b.Passphrase + "\n"), nil
}
