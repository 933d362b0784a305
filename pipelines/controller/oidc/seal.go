package oidc

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
)

// sealer encrypts and authenticates cookie values with AES-256-GCM under a key derived from
// the configured session key, so every replica that shares the key opens every cookie and no
// server-side session store is needed. The cookie's name is bound in as associated data: a
// flow cookie cannot be replayed as a session cookie.
type sealer struct{ aead cipher.AEAD }

// errTampered is a cookie that was altered, or sealed under another key.
var errTampered = errors.New("the cookie failed its integrity check")

func newSealer(key string) (*sealer, error) {
	k, err := hkdf.Key(sha256.New, []byte(key), nil, "prflow oidc cookies v1", 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

func (s *sealer) seal(name string, v any) (string, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, s.aead.NonceSize())
	_, _ = rand.Read(nonce)
	out := s.aead.Seal(nonce, nonce, plain, []byte(name))
	return base64.RawURLEncoding.EncodeToString(out), nil
}

func (s *sealer) open(name, value string, v any) error {
	raw, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(raw) < s.aead.NonceSize() {
		return errTampered
	}
	n := s.aead.NonceSize()
	plain, err := s.aead.Open(nil, raw[:n], raw[n:], []byte(name))
	if err != nil {
		return errTampered
	}
	if err := json.Unmarshal(plain, v); err != nil {
		return errTampered
	}
	return nil
}
