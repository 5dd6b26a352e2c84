package tlsterm

import (
	"crypto/tls"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// SecretError says what is wrong with a TLS Secret, in words a user can act on; Reason is a
// CamelCase word for a status condition.
type SecretError struct {
	Reason  string
	Message string
}

func (e *SecretError) Error() string { return e.Message }

// ParseSecret returns the certificate a kubernetes.io/tls Secret holds, with its Leaf parsed, or a
// *SecretError saying what to fix. An expired certificate is still served (clients then refuse it,
// as they would from any server); renewing the Secret replaces it.
func ParseSecret(s *corev1.Secret) (*tls.Certificate, error) {
	name := s.Namespace + "/" + s.Name
	if s.Type != corev1.SecretTypeTLS {
		return nil, &SecretError{Reason: "WrongSecretType", Message: fmt.Sprintf("Secret %s is of type %q; it must be of type %s (kubectl create secret tls)", name, s.Type, corev1.SecretTypeTLS)}
	}
	crt, key := s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
	if len(crt) == 0 || len(key) == 0 {
		return nil, &SecretError{Reason: "MissingKeys", Message: fmt.Sprintf("Secret %s must hold both %s and %s", name, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)}
	}
	cert, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, &SecretError{Reason: "InvalidCertificate", Message: fmt.Sprintf("Secret %s: %s and %s do not make a certificate: %v", name, corev1.TLSCertKey, corev1.TLSPrivateKeyKey, err)}
	}
	return &cert, nil
}
