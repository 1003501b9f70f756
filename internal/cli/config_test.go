package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
)

// runCLI runs the CLI in-process and returns its exit code and output.
func runCLI(t *testing.T, env []string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Run(t.Context(), args, strings.NewReader(stdin), &out, &errb, env)
	return code, out.String(), errb.String()
}

func TestSettingsPrecedence(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kiln", "config.json")
	if err := writeConfig(path, Config{Server: "http://file", Token: "file-token", Project: "file-project"}); err != nil {
		t.Fatal(err)
	}
	fullEnv := map[string]string{"XDG_CONFIG_HOME": dir, "KILN_SERVER": "http://env", "KILN_TOKEN": "env-token", "KILN_PROJECT": "env-project"}
	tests := []struct {
		name  string
		env   map[string]string
		flags globalFlags
		want  Config
	}{
		{"file", map[string]string{"XDG_CONFIG_HOME": dir}, globalFlags{},
			Config{Server: "http://file", Token: "file-token", Project: "file-project"}},
		{"env over file", fullEnv, globalFlags{},
			Config{Server: "http://env", Token: "env-token", Project: "env-project"}},
		{"flags over env", fullEnv, globalFlags{server: "http://flag", token: "flag-token", project: "flag-project"},
			Config{Server: "http://flag", Token: "flag-token", Project: "flag-project"}},
		{"mixed", map[string]string{"XDG_CONFIG_HOME": dir, "KILN_TOKEN": "env-token"}, globalFlags{server: "http://flag"},
			Config{Server: "http://flag", Token: "env-token", Project: "file-project"}},
		{"no file: default project", map[string]string{"HOME": t.TempDir()}, globalFlags{},
			Config{Project: DefaultProject}},
		{"--config", map[string]string{}, globalFlags{config: path},
			Config{Server: "http://file", Token: "file-token", Project: "file-project"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &app{env: tt.env, flags: tt.flags}
			s, err := a.settings()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, s.Config); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigPath(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"KILN_CONFIG", map[string]string{"KILN_CONFIG": "/k/c.json", "XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/k/c.json"},
		{"xdg", map[string]string{"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/x/kiln/config.json"},
		{"home", map[string]string{"HOME": "/h"}, "/h/.config/kiln/config.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := (&app{env: tt.env}).configPath()
			if err != nil || got != tt.want {
				t.Errorf("configPath = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// projectsServer serves projectsHandler.
func projectsServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(projectsHandler())
	t.Cleanup(srv.Close)
	return srv
}

// projectsHandler answers every GET (GET /v1/projects is what login asks)
// with a list of one project for token "good", and 401 otherwise.
func projectsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer good" {
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(v1.ErrorResponse{Error: v1.Error{Code: v1.CodeUnauthorized, Message: "bad token"}})
			return
		}
		json.NewEncoder(w).Encode(v1.List[v1.Project]{Value: []v1.Project{{Name: "default"}}})
	})
}

func TestLogin(t *testing.T) {
	srv := projectsServer(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("good\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		args  []string
		stdin string
	}{
		{"--token", []string{"--token", "good"}, ""},
		{"--token-file", []string{"--token-file", tokenFile}, ""},
		{"stdin", nil, "good\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			env := []string{"XDG_CONFIG_HOME=" + dir}
			args := append([]string{"login", "--server", srv.URL, "-p", "team"}, tt.args...)
			code, _, stderr := runCLI(t, env, tt.stdin, args...)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			path := filepath.Join(dir, "kiln", "config.json")
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("config mode = %v, want 0600", fi.Mode().Perm())
			}
			di, err := os.Stat(filepath.Dir(path))
			if err != nil {
				t.Fatal(err)
			}
			if di.Mode().Perm() != 0o700 {
				t.Errorf("config dir mode = %v, want 0700", di.Mode().Perm())
			}
			got, err := readConfig(path)
			if err != nil {
				t.Fatal(err)
			}
			want := Config{Server: srv.URL, Token: "good", Project: "team"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoginFailures(t *testing.T) {
	srv := projectsServer(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"refused token", []string{"login", "--server", srv.URL, "--token", "bad"}, ExitError,
			"error: Unauthorized: bad token\n  " + srv.URL + " refused the token; nothing was saved\n"},
		{"unreachable", []string{"login", "--server", dead.URL, "--token", "good"}, ExitError, ""},
		{"no server", []string{"login", "--token", "good"}, ExitUsage,
			"error: login needs --server URL\nRun 'kiln login --help' for usage.\n"},
		{"empty token", []string{"login", "--server", srv.URL}, ExitUsage, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			code, _, stderr := runCLI(t, []string{"XDG_CONFIG_HOME=" + dir}, "", tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			if tt.stderr != "" && stderr != tt.stderr {
				t.Errorf("stderr = %q, want %q", stderr, tt.stderr)
			}
			if _, err := os.Stat(filepath.Join(dir, "kiln", "config.json")); err == nil {
				t.Error("config written after a failed login")
			}
		})
	}
}
