package daemon

import (
	"encoding/json"
	"os"
	"strings"

	"kiln.dev/kiln/internal/oidc"
)

// readOIDCSecrets reads each identity provider's console client secret
// from its file, and checks the providers (oidc.New) so that a mistake stops
// kilnd at start, naming the flag.
func (c *Config) readOIDCSecrets() error {
	for i := range c.OIDC {
		is := &c.OIDC[i]
		if is.ConsoleClientSecretFile == "" {
			continue
		}
		b, err := os.ReadFile(is.ConsoleClientSecretFile)
		if err != nil {
			return flagError("--oidc-console-client-secret-file", is.ConsoleClientSecretFile, "read the console's client secret: %w", err)
		}
		is.ConsoleClientSecret = strings.TrimSpace(string(b))
		if is.ConsoleClientSecret == "" {
			return flagError("--oidc-console-client-secret-file", is.ConsoleClientSecretFile, "the file is empty")
		}
	}
	if _, err := oidc.New(c.OIDC, nil, nil); err != nil {
		return flagError("--oidc-issuer", "", "%w", err)
	}
	return nil
}

// ReadOIDCConfig reads --oidc-config: a JSON list of identity providers
// (oidc.Issuer's fields), for more than the one the --oidc-* flags give.
func ReadOIDCConfig(path string) ([]oidc.Issuer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, flagError("--oidc-config", path, "%w", err)
	}
	var out []oidc.Issuer
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return nil, flagError("--oidc-config", path, "not a JSON list of issuers (url, clientID, consoleClientID, consoleClientSecretFile, usernameClaim, groupsClaim): %w", err)
	}
	if len(out) == 0 {
		return nil, flagError("--oidc-config", path, "%s lists no issuer", path)
	}
	return out, nil
}

// OIDCFlags are the --oidc-* flags of one identity provider.
type OIDCFlags struct {
	oidc.Issuer
	Config string // --oidc-config
}

// Issuers returns the identity providers the flags give.
func (f OIDCFlags) Issuers() ([]oidc.Issuer, error) {
	var out []oidc.Issuer
	if f.Config != "" {
		list, err := ReadOIDCConfig(f.Config)
		if err != nil {
			return nil, err
		}
		out = list
	}
	if f.URL != "" {
		out = append(out, f.Issuer)
	} else if f.ClientID != "" || f.ConsoleClientID != "" || f.ConsoleClientSecretFile != "" {
		return nil, flagError("--oidc-issuer", "", "the --oidc-* flags need --oidc-issuer")
	}
	return out, nil
}
