package aws

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// signature is who signed a request, for which region and service.
type signature struct {
	cred    Credential
	region  string
	service string
}

// maxSkew is how far a request's signing time may be from the clock, as
// AWS allows.
const maxSkew = 15 * time.Minute

// authenticate checks the request's SigV4 Authorization header: the access
// key is one the server was given and the signature is the one its secret
// makes for this request. The check signs a copy of the request (only the
// headers the client signed) with the SDK's own signer and compares.
func (s *Server) authenticate(r *http.Request, body []byte) (signature, error) {
	auth := r.Header.Get("Authorization")
	const algorithm = "AWS4-HMAC-SHA256 "
	if !strings.HasPrefix(auth, algorithm) {
		return signature{service: serviceFromHost(r)}, errorf(http.StatusForbidden, "MissingAuthenticationToken", "Request is missing Authentication Token")
	}
	fields := map[string]string{}
	for _, f := range strings.Split(strings.TrimPrefix(auth, algorithm), ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/") // KEY/DATE/REGION/SERVICE/aws4_request
	if len(scope) != 5 || scope[4] != "aws4_request" {
		return signature{service: serviceFromHost(r)}, errorf(http.StatusBadRequest, "IncompleteSignature", "Authorization header requires a Credential of the form KEY/DATE/REGION/SERVICE/aws4_request")
	}
	sig := signature{region: scope[2], service: scope[3]}
	cred, ok := s.creds[scope[0]]
	if !ok {
		cred, ok = s.temporary(scope[0])
	}
	if !ok {
		return sig, invalidKey(sig.service)
	}
	sig.cred = cred
	if cred.SessionToken != "" {
		if r.Header.Get("X-Amz-Security-Token") != cred.SessionToken {
			return sig, invalidKey(sig.service)
		}
		if s.opts.Now().After(cred.Expires) {
			return sig, errorf(http.StatusBadRequest, "ExpiredToken", "The security token included in the request is expired")
		}
	}
	when, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return sig, errorf(http.StatusBadRequest, "IncompleteSignature", "the X-Amz-Date header is missing or not of the form 20060102T150405Z")
	}
	if d := s.opts.Now().Sub(when); d > maxSkew || d < -maxSkew {
		return sig, errorf(http.StatusForbidden, "RequestExpired", "Request has expired: signed at %s, %s from the server's time", when.Format(time.RFC3339), d.Round(time.Second))
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	sum := sha256.Sum256(body)
	bodyHash := hex.EncodeToString(sum[:])
	switch {
	case payload == "":
		payload = bodyHash
	case payload == "UNSIGNED-PAYLOAD" || strings.HasPrefix(payload, "STREAMING-"):
	case payload != bodyHash:
		return sig, errorf(http.StatusBadRequest, "XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed.")
	}

	// The copy has only the headers the client signed.
	signed := map[string]bool{}
	for _, h := range strings.Split(fields["SignedHeaders"], ";") {
		signed[h] = true
	}
	u := *r.URL
	u.Scheme, u.Host = "http", r.Host
	again, _ := http.NewRequest(r.Method, u.String(), nil)
	again.Host = r.Host
	for k, vs := range r.Header {
		lk := strings.ToLower(k)
		if signed[lk] && lk != "host" && lk != "content-length" && lk != "x-amz-date" {
			again.Header[k] = vs
		}
	}
	if signed["content-length"] {
		again.ContentLength = int64(len(body))
	}
	signer := v4.NewSigner(func(o *v4.SignerOptions) {
		o.DisableURIPathEscaping = sig.service == "s3" // S3 signs the path as sent
	})
	err = signer.SignHTTP(r.Context(), awssdk.Credentials{AccessKeyID: cred.AccessKeyID, SecretAccessKey: cred.SecretAccessKey, SessionToken: cred.SessionToken},
		again, payload, sig.service, sig.region, when)
	if err != nil || signatureOf(again.Header.Get("Authorization")) != fields["Signature"] {
		return sig, signatureMismatch(sig.service)
	}
	return sig, nil
}

// signatureOf returns the Signature field of an Authorization header.
func signatureOf(auth string) string {
	_, after, _ := strings.Cut(auth, "Signature=")
	return after
}

// serviceFromHost guesses the service of an unsigned request from its
// path, to answer in the right error shape: S3's paths name a bucket.
func serviceFromHost(r *http.Request) string {
	if r.Method == http.MethodPost && r.URL.Path == "/" {
		return "ec2"
	}
	return "s3"
}

func invalidKey(service string) error {
	switch service {
	case "ec2":
		return errorf(http.StatusUnauthorized, "AuthFailure", "AWS was not able to validate the provided access credentials")
	case "s3":
		return errorf(http.StatusForbidden, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.")
	}
	return errorf(http.StatusForbidden, "InvalidClientTokenId", "The security token included in the request is invalid.")
}

func signatureMismatch(service string) error {
	if service == "ec2" {
		return errorf(http.StatusUnauthorized, "AuthFailure", "AWS was not able to validate the provided access credentials")
	}
	return errorf(http.StatusForbidden, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.")
}

// queryValues parses a Query protocol body (or, for a GET, the URL's
// query).
func queryValues(r *http.Request, body []byte) (url.Values, error) {
	if r.Method == http.MethodGet {
		return r.URL.Query(), nil
	}
	return url.ParseQuery(string(body))
}
