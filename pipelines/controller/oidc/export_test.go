package oidc

import "net/http"

// ForgeFlowCookie seals a sign-in state cookie as the server would, with the given state and
// PKCE verifier: for tests of a callback whose verifier is missing.
func (p *Provider) ForgeFlowCookie(state, verifier string) *http.Cookie {
	v, _ := p.seal.seal(flowCookie, flowData{State: state, Nonce: "n", Verifier: verifier, Next: "/ui/", At: p.now().Unix()})
	return &http.Cookie{Name: flowCookie, Value: v}
}
