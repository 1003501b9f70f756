package aws

import (
	"bytes"
	"crypto/ed25519"
	"crypto/md5"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"time"
)

// keyPair is an EC2 key pair: its public key (OpenSSH authorized_keys
// form) and fingerprint; the private key is given once, by CreateKeyPair,
// and not kept.
type keyPair struct {
	ID          string    `json:"id"`
	Region      string    `json:"region"`
	Name        string    `json:"name"`
	Type        string    `json:"type"` // rsa or ed25519
	Fingerprint string    `json:"fingerprint"`
	PublicKey   string    `json:"publicKey"`
	Created     time.Time `json:"created"`
}

func (k *keyPair) key() string          { return k.ID }
func (k *keyPair) regionOf() string     { return k.Region }
func (k *keyPair) createdAt() time.Time { return k.Created }

func (s *Server) keyNamed(region, name string) *keyPair {
	for _, k := range s.net().KeyPairs {
		if k.Region == region && k.Name == name {
			return k
		}
	}
	return nil
}

// newKeyPair checks a new key pair's name and records it.
func (s *Server) newKeyPair(c *call, keyType, fingerprint, public string) (*keyPair, error) {
	name, err := c.p.Required("KeyName")
	if err != nil {
		return nil, err
	}
	if len(name) > 255 {
		return nil, invalidParameter("Key pair names are at most 255 characters")
	}
	if s.keyNamed(c.region, name) != nil {
		return nil, errorf(http.StatusBadRequest, "InvalidKeyPair.Duplicate", "The keypair '%s' already exists.", name)
	}
	k := &keyPair{ID: randomID("key", 17), Region: c.region, Name: name, Type: keyType, Fingerprint: fingerprint,
		PublicKey: public, Created: s.opts.Now()}
	s.net().KeyPairs[k.ID] = k
	s.tag(k.ID, tagSpecs(c.p, "key-pair"))
	return k, nil
}

func (s *Server) createKeyPair(c *call) (any, error) {
	if f := c.p.Get("KeyFormat"); f != "" && f != "pem" {
		return nil, invalidParameter("The local AWS gives key material in the pem format only, not %q", f)
	}
	if name, _ := c.p.Required("KeyName"); s.keyNamed(c.region, name) != nil {
		return nil, errorf(http.StatusBadRequest, "InvalidKeyPair.Duplicate", "The keypair '%s' already exists.", name)
	}
	keyType := c.p.Get("KeyType")
	if keyType == "" {
		keyType = "rsa"
	}
	material, fingerprint, public, err := generateKey(keyType)
	if err != nil {
		return nil, err
	}
	k, err := s.newKeyPair(c, keyType, fingerprint, public)
	if err != nil {
		return nil, err
	}
	return struct {
		Name        string   `xml:"keyName"`
		Fingerprint string   `xml:"keyFingerprint"`
		Material    string   `xml:"keyMaterial"`
		ID          string   `xml:"keyPairId"`
		Tags        []ec2Tag `xml:"tagSet>item"`
	}{k.Name, k.Fingerprint, material, k.ID, s.tagItems(k.ID)}, nil
}

// generateKey makes a key pair as CreateKeyPair does: an RSA key in PKCS#1
// PEM with the SHA-1 fingerprint of its PKCS#8 form, or an ED25519 key in
// OpenSSH's format with the SHA-256 fingerprint of its public key.
func generateKey(keyType string) (material, fingerprint, public string, err error) {
	switch keyType {
	case "rsa":
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return "", "", "", fmt.Errorf("generating an RSA key: %w", err)
		}
		p8, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return "", "", "", fmt.Errorf("encoding an RSA key: %w", err)
		}
		sum := sha1.Sum(p8)
		blob := rsaBlob(&k.PublicKey)
		material = string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}))
		return material, colonHex(sum[:]), "ssh-rsa " + base64.StdEncoding.EncodeToString(blob), nil
	case "ed25519":
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return "", "", "", fmt.Errorf("generating an ED25519 key: %w", err)
		}
		blob := ed25519Blob(pub)
		sum := sha256.Sum256(blob)
		material = string(pem.EncodeToMemory(&pem.Block{Type: "OPENSSH PRIVATE KEY", Bytes: openSSHPrivate(pub, priv, blob)}))
		return material, base64.StdEncoding.EncodeToString(sum[:]), "ssh-ed25519 " + base64.StdEncoding.EncodeToString(blob), nil
	}
	return "", "", "", invalidParameter("Value (%s) for parameter keyType is invalid. Valid values are rsa and ed25519.", keyType)
}

func (s *Server) importKeyPair(c *call) (any, error) {
	enc, err := c.p.Required("PublicKeyMaterial")
	if err != nil {
		return nil, err
	}
	text, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "InvalidKey.Format", "Key is not in valid OpenSSH public key format")
	}
	keyType, fingerprint, public, err := parsePublicKey(string(text))
	if err != nil {
		return nil, err
	}
	k, err := s.newKeyPair(c, keyType, fingerprint, public)
	if err != nil {
		return nil, err
	}
	return struct {
		Name        string   `xml:"keyName"`
		Fingerprint string   `xml:"keyFingerprint"`
		ID          string   `xml:"keyPairId"`
		Tags        []ec2Tag `xml:"tagSet>item"`
	}{k.Name, k.Fingerprint, k.ID, s.tagItems(k.ID)}, nil
}

// parsePublicKey reads an OpenSSH public key line ("ssh-rsa AAAA...
// comment"): its type and fingerprint as AWS gives them for imported keys
// (MD5 of the key for RSA, SHA-256 for ED25519).
func parsePublicKey(line string) (keyType, fingerprint, public string, err error) {
	bad := errorf(http.StatusBadRequest, "InvalidKey.Format", "Key is not in valid OpenSSH public key format")
	fields := strings.Fields(line)
	if len(fields) < 2 {
		return "", "", "", bad
	}
	blob, err := base64.StdEncoding.DecodeString(fields[1])
	if err != nil {
		return "", "", "", bad
	}
	name, _, ok := sshString(blob)
	if !ok || string(name) != fields[0] {
		return "", "", "", bad
	}
	public = fields[0] + " " + fields[1]
	switch fields[0] {
	case "ssh-rsa":
		sum := md5.Sum(blob)
		return "rsa", colonHex(sum[:]), public, nil
	case "ssh-ed25519":
		sum := sha256.Sum256(blob)
		return "ed25519", base64.StdEncoding.EncodeToString(sum[:]), public, nil
	}
	return "", "", "", bad
}

type xmlKeyPair struct {
	ID          string   `xml:"keyPairId"`
	Name        string   `xml:"keyName"`
	Type        string   `xml:"keyType"`
	Fingerprint string   `xml:"keyFingerprint"`
	PublicKey   string   `xml:"publicKey,omitempty"`
	CreateTime  string   `xml:"createTime"`
	Tags        []ec2Tag `xml:"tagSet>item"`
}

func (s *Server) describeKeyPairs(c *call) (any, error) {
	names := c.p.List("KeyName")
	for _, n := range names {
		if k := s.keyNamed(c.region, n); k == nil || !s.visible(k.Created) {
			return nil, errorf(http.StatusBadRequest, "InvalidKeyPair.NotFound", "The key pair '%s' does not exist", n)
		}
	}
	ks, err := describeRecords(s, c, s.net().KeyPairs, "KeyPairId", func(k *keyPair, name string) ([]string, bool) {
		switch name {
		case "key-pair-id":
			return one(k.ID)
		case "key-name":
			return one(k.Name)
		case "fingerprint":
			return one(k.Fingerprint)
		case "key-type":
			return one(k.Type)
		}
		return nil, false
	})
	if err != nil {
		return nil, err
	}
	var out struct {
		Keys []xmlKeyPair `xml:"keySet>item"`
	}
	for _, k := range ks {
		if len(names) > 0 && !anyMatch(names, []string{k.Name}) {
			continue
		}
		x := xmlKeyPair{ID: k.ID, Name: k.Name, Type: k.Type, Fingerprint: k.Fingerprint, CreateTime: awsTime(k.Created), Tags: s.tagItems(k.ID)}
		if c.p.Bool("IncludePublicKey") {
			x.PublicKey = k.PublicKey
		}
		out.Keys = append(out.Keys, x)
	}
	return out, nil
}

// deleteKeyPair deletes a key pair by name or id; one that is not there is
// no error, as on AWS.
func (s *Server) deleteKeyPair(c *call) (any, error) {
	var k *keyPair
	if id := c.p.Get("KeyPairId"); id != "" {
		k, _ = lookup(s.net().KeyPairs, c.region, id)
	} else if name := c.p.Get("KeyName"); name != "" {
		k = s.keyNamed(c.region, name)
	} else {
		return nil, errorf(http.StatusBadRequest, "MissingParameter", "The request must contain the parameter KeyName or KeyPairId")
	}
	out := struct {
		Return bool   `xml:"return"`
		ID     string `xml:"keyPairId,omitempty"`
	}{Return: true}
	if k != nil {
		out.ID = k.ID
		delete(s.net().KeyPairs, k.ID)
		delete(s.st.EC2.Tags, k.ID)
	}
	return out, nil
}

// SSH wire encoding (RFC 4251): what OpenSSH public keys and its private
// key format are made of.

func sshPutString(b *bytes.Buffer, v []byte) {
	_ = binary.Write(b, binary.BigEndian, uint32(len(v)))
	b.Write(v)
}

func sshString(b []byte) (v, rest []byte, ok bool) {
	if len(b) < 4 {
		return nil, nil, false
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(len(b)-4) < uint64(n) {
		return nil, nil, false
	}
	return b[4 : 4+n], b[4+n:], true
}

// sshMpint is a positive big integer as an SSH mpint.
func sshMpint(n *big.Int) []byte {
	v := n.Bytes()
	if len(v) > 0 && v[0]&0x80 != 0 {
		v = append([]byte{0}, v...)
	}
	return v
}

func rsaBlob(k *rsa.PublicKey) []byte {
	var b bytes.Buffer
	sshPutString(&b, []byte("ssh-rsa"))
	sshPutString(&b, sshMpint(big.NewInt(int64(k.E))))
	sshPutString(&b, sshMpint(k.N))
	return b.Bytes()
}

func ed25519Blob(pub ed25519.PublicKey) []byte {
	var b bytes.Buffer
	sshPutString(&b, []byte("ssh-ed25519"))
	sshPutString(&b, pub)
	return b.Bytes()
}

// openSSHPrivate is an unencrypted "openssh-key-v1" private key, the body
// of -----BEGIN OPENSSH PRIVATE KEY-----.
func openSSHPrivate(pub ed25519.PublicKey, priv ed25519.PrivateKey, blob []byte) []byte {
	var check [4]byte
	_, _ = rand.Read(check[:])
	var inner bytes.Buffer
	inner.Write(check[:])
	inner.Write(check[:])
	sshPutString(&inner, []byte("ssh-ed25519"))
	sshPutString(&inner, pub)
	sshPutString(&inner, priv)
	sshPutString(&inner, nil) // comment
	for i := byte(1); inner.Len()%8 != 0; i++ {
		inner.WriteByte(i)
	}
	var b bytes.Buffer
	b.WriteString("openssh-key-v1\x00")
	sshPutString(&b, []byte("none"))
	sshPutString(&b, []byte("none"))
	sshPutString(&b, nil)
	_ = binary.Write(&b, binary.BigEndian, uint32(1))
	sshPutString(&b, blob)
	sshPutString(&b, inner.Bytes())
	return b.Bytes()
}

func colonHex(b []byte) string {
	parts := make([]string, len(b))
	for i, v := range b {
		parts[i] = fmt.Sprintf("%02x", v)
	}
	return strings.Join(parts, ":")
}
