// Package azjoin fetches a node's join files from an Azure staging blob
// (kiln-agent --join-from https://ACCOUNT.blob.core.windows.net/CONTAINER/BLOB
// --join-identity CLIENT_ID) with a token of the virtual machine's
// user-assigned managed identity, which the instance metadata service
// hands out: a virtual machine whose custom data names where its join
// files are, not what they say. Two HTTP calls, as Azure documents them:
//
//	GET http://169.254.169.254/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https://storage.azure.com/&client_id=ID
//	    Metadata: true
//	GET BLOB_URL  Authorization: Bearer TOKEN, x-ms-version
//
// The endpoints are Azure's unless the environment names others: the
// metadata service's scheme and host in AZURE_POD_IDENTITY_AUTHORITY_HOST
// (the name Azure's identity libraries give a redirected IMDS), and
// KILN_AZURE_BLOB_HOST, a scheme and host the blob's calls go to instead
// of the URL's, its path kept (the local Azure's machines are given both:
// docs/azure-local.md).
package azjoin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"kiln.dev/kiln/internal/agent/joinfiles"
)

// The environment variables that redirect the calls (package comment).
const (
	IMDSEnvVar     = "AZURE_POD_IDENTITY_AUTHORITY_HOST"
	BlobHostEnvVar = "KILN_AZURE_BLOB_HOST"
)

// Azure's instance metadata service, the token's resource and the Blob
// service's version the calls are made with.
const (
	defaultIMDS     = "http://169.254.169.254"
	storageResource = "https://storage.azure.com/"
	imdsAPIVersion  = "2018-02-01"
	storageVersion  = "2023-11-03"
)

// Options say what to fetch and where to write it.
type Options struct {
	// URL is the blob's https URL, holding a v1.JoinBundle.
	URL string
	// ClientID is the client id of the managed identity to fetch it as
	// (one of the virtual machine's user-assigned identities); "" lets
	// IMDS pick the machine's only one.
	ClientID string
	// CredentialsFile and PassphraseFile are written (mode 0600).
	CredentialsFile, PassphraseFile string
	// Timeout bounds the retries (the identity's role assignment may not
	// have reached the Blob service at boot); default 5 minutes.
	Timeout time.Duration
	// HTTPClient makes the calls; default one with a 30 s timeout.
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// Parse checks a blob URL: https, with a container and a blob.
func Parse(u string) (*url.URL, error) {
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "https" || p.Host == "" || strings.Count(strings.Trim(p.Path, "/"), "/") < 1 {
		return nil, fmt.Errorf("--join-from %q: want https://ACCOUNT.blob.core.windows.net/CONTAINER/BLOB", u)
	}
	return p, nil
}

// FetchError is a fetch that failed until its timeout: what it waited
// for (the blob, as the identity), how long, and the last failure.
type FetchError struct {
	URL, ClientID string
	Waited        time.Duration
	Err           error
}

func (e *FetchError) Error() string {
	who := "the virtual machine's managed identity"
	if e.ClientID != "" {
		who = "managed identity " + e.ClientID
	}
	return fmt.Sprintf("fetch the join files from %s as %s (waited %s): %v", e.URL, who, e.Waited.Round(time.Second), e.Err)
}

func (e *FetchError) Unwrap() error { return e.Err }

// Fetch gets the bundle and writes the join files, retrying within
// Timeout; the error is a *FetchError.
func Fetch(ctx context.Context, o Options) error {
	blobURL, err := Parse(o.URL)
	if err != nil {
		return err
	}
	if h := os.Getenv(BlobHostEnvVar); h != "" {
		to, err := url.Parse(h)
		if err != nil || to.Host == "" {
			return fmt.Errorf("%s=%q: want SCHEME://HOST[:PORT]", BlobHostEnvVar, h)
		}
		blobURL.Scheme, blobURL.Host = to.Scheme, to.Host
	}
	log := cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	hc := cmp.Or(o.HTTPClient, &http.Client{Timeout: 30 * time.Second})
	imds := strings.TrimSuffix(cmp.Or(os.Getenv(IMDSEnvVar), defaultIMDS), "/")
	start := time.Now()
	deadline := start.Add(cmp.Or(o.Timeout, 5*time.Minute))
	for wait := time.Second; ; wait = min(2*wait, 15*time.Second) {
		var tok string
		tok, err = token(ctx, hc, imds, o.ClientID)
		if err == nil {
			var raw []byte
			if raw, err = get(ctx, hc, blobURL.String(), tok); err == nil {
				b, perr := joinfiles.Parse(raw)
				if perr != nil {
					return &FetchError{URL: o.URL, ClientID: o.ClientID, Waited: time.Since(start), Err: perr}
				}
				return joinfiles.Write(o.CredentialsFile, o.PassphraseFile, b)
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return &FetchError{URL: o.URL, ClientID: o.ClientID, Waited: time.Since(start), Err: err}
		}
		log.Warn("could not fetch the join files yet; retrying", "from", o.URL, "identity", o.ClientID, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return &FetchError{URL: o.URL, ClientID: o.ClientID, Waited: time.Since(start), Err: ctx.Err()}
		case <-time.After(wait):
		}
	}
}

// token asks the instance metadata service for a token of the identity
// for Azure Storage.
func token(ctx context.Context, hc *http.Client, imds, clientID string) (string, error) {
	q := url.Values{"api-version": {imdsAPIVersion}, "resource": {storageResource}}
	if clientID != "" {
		q.Set("client_id", clientID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, imds+"/metadata/identity/oauth2/token?"+q.Encode(), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Metadata", "true")
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("the instance metadata service: %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var out struct {
		AccessToken string `json:"access_token"`
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	_ = json.Unmarshal(raw, &out)
	if resp.StatusCode != http.StatusOK {
		if out.Error != "" {
			return "", fmt.Errorf("the instance metadata service answered %d %s: %s", resp.StatusCode, out.Error, out.Description)
		}
		return "", fmt.Errorf("the instance metadata service answered %d: %.200s", resp.StatusCode, raw)
	}
	if out.AccessToken == "" {
		return "", errors.New("the instance metadata service answered no access token")
	}
	return out.AccessToken, nil
}

// get reads the blob with the token.
func get(ctx context.Context, hc *http.Client, u, tok string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("x-ms-version", storageVersion)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the Blob service: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, joinfiles.MaxBundle))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		code := resp.Header.Get("x-ms-error-code")
		return nil, fmt.Errorf("the Blob service answered %d %s", resp.StatusCode, cmp.Or(code, http.StatusText(resp.StatusCode)))
	}
	return raw, nil
}
