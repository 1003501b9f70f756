package packs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/secretref"
	"kiln.dev/kiln/internal/store"
)

// SecretReader reads a project's secrets (the store).
type SecretReader interface {
	GetProjectSecret(ctx context.Context, project, name string) (*store.ProjectSecret, error)
}

// ReadSecrets reads the secrets of project that the values and manifests
// of pks name, and only those: every key of each, keyed NAME.KEY as
// Target.Secrets holds them, and each secret's etag by name. A secret the
// project does not have is left out: applying a pack that names it fails,
// naming it.
func ReadSecrets(ctx context.Context, st SecretReader, project string, pks []v1.Pack) (values, etags map[string]string, err error) {
	values, etags = map[string]string{}, map[string]string{}
	for _, name := range secretref.Secrets(pks) {
		ps, err := st.GetProjectSecret(ctx, project, name)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read secret %q: %w", name, err)
		}
		etags[name] = ps.ETag
		for k, v := range ps.Data {
			values[secretref.Ref{Secret: name, Key: k}.String()] = v
		}
	}
	return values, etags, nil
}

// Digest identifies a pack as applied (v1.PackStatus.Digest): its
// definition and, when its values or manifests name project secrets, those
// secrets' etags (from etags, by name; ReadSecrets), so that a secret
// changed is a change of the pack. It holds no value. A pack that names no
// secret has the digest it had before secrets existed.
func Digest(pk v1.Pack, etags map[string]string) string {
	b, _ := json.Marshal(pk)
	h := sha256.New()
	h.Write(b)
	for _, name := range secretref.Secrets([]v1.Pack{pk}) {
		fmt.Fprintf(h, "\x00secret %s %s", name, etags[name])
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
