package cli

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"kiln.dev/kiln/internal/atomicfile"
)

// Config is the file 'kiln login' writes.
type Config struct {
	Server  string `json:"server"`
	Token   string `json:"token"`
	Project string `json:"project,omitempty"`
	// CA is the PEM certificate of the CA that verifies the server's
	// certificate (kiln login --ca-file), kept in the file itself so the
	// file alone is enough; empty for the system's CAs.
	CA string `json:"ca,omitempty"`
	// OIDC is set by 'kiln login --oidc': Token is then a signed-in one,
	// renewed with the identity provider's refresh token.
	OIDC *OIDCLogin `json:"oidc,omitempty"`
}

// settings are the values a command uses, after precedence.
type settings struct {
	Config
	// Path is the config file consulted.
	Path string
	// file is what the config file says, before flags and environment.
	file Config
}

// DefaultProject is used when no flag, environment or file names one.
const DefaultProject = "default"

// configPath is --config, else $KILN_CONFIG, else
// $XDG_CONFIG_HOME/kiln/config.json, else $HOME/.config/kiln/config.json.
func (a *app) configPath() (string, error) {
	if a.flags.config != "" {
		return a.flags.config, nil
	}
	if p := a.env["KILN_CONFIG"]; p != "" {
		return p, nil
	}
	if x := a.env["XDG_CONFIG_HOME"]; x != "" {
		return filepath.Join(x, "kiln", "config.json"), nil
	}
	if h := a.env["HOME"]; h != "" {
		return filepath.Join(h, ".config", "kiln", "config.json"), nil
	}
	return "", errors.New("cannot find the config file: set --config, KILN_CONFIG, XDG_CONFIG_HOME or HOME")
}

// settings resolves server, token, project and CA: flags over KILN_SERVER,
// KILN_TOKEN, KILN_PROJECT and KILN_CA_FILE over the config file over
// defaults. A missing config file is not an error.
func (a *app) settings() (settings, error) {
	var s settings
	path, err := a.configPath()
	if err == nil {
		s.Path = path
		cfg, err := readConfig(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return s, err
		}
		s.Config, s.file = cfg, cfg
	}
	pick(&s.Server, a.env["KILN_SERVER"], a.flags.server)
	pick(&s.Token, a.env["KILN_TOKEN"], a.flags.token)
	pick(&s.Project, a.env["KILN_PROJECT"], a.flags.project)
	if s.Project == "" {
		s.Project = DefaultProject
	}
	ca, err := a.caFromFile()
	if err != nil {
		return s, err
	}
	pick(&s.CA, string(ca))
	return s, nil
}

// caFromFile reads the CA file of --ca-file, else KILN_CA_FILE; nil when
// neither is set.
func (a *app) caFromFile() ([]byte, error) {
	path := a.env["KILN_CA_FILE"]
	pick(&path, a.flags.caFile)
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the CA file: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", path)
	}
	return data, nil
}

// pick overwrites *dst with each non-empty value in turn, so the last
// non-empty one wins.
func pick(dst *string, values ...string) {
	for _, v := range values {
		if v != "" {
			*dst = v
		}
	}
}

func readConfig(path string) (Config, error) {
	var c Config
	data, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("read config: %w", err)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("read config %s: %w", path, err)
	}
	return c, nil
}

// writeConfig writes c to path with mode 0600 in a directory with mode 0700,
// replacing any previous file atomically.
func writeConfig(path string, c Config) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	if err := atomicfile.WriteJSON(path, c, 0o600); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	return nil
}
