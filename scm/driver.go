package scm

import (
	"log/slog"
	"net/http"
	"time"
)

// What every forge driver (github, gitlab, bitbucket) is built with and offers; the URLs,
// credentials and API calls that differ per forge stay in the driver packages.

// Forge is what a forge driver offers: the Provider the steps use and the Checker that
// `prflow connectors check` uses.
type Forge interface {
	Provider
	Checker
}

// DefaultTimeout bounds every request of a driver built without an HTTP client.
const DefaultTimeout = 30 * time.Second

// ClientOptions are what every forge driver is built with besides its URL and credentials;
// each driver's WithHTTPClient and WithLogger options set them.
type ClientOptions struct {
	// HTTPClient is normally one whose transport adds rate limiting, retries, TLS settings
	// and metrics (scm/transport); its Timeout bounds every request.
	HTTPClient *http.Client
	// Logger receives the driver's log lines; tokens never reach it.
	Logger *slog.Logger
}

// Client is the HTTP client set, or a plain one with DefaultTimeout.
func (o ClientOptions) Client() *http.Client {
	if o.HTTPClient == nil {
		return &http.Client{Timeout: DefaultTimeout}
	}
	return o.HTTPClient
}

// Log is the logger set, or one that discards.
func (o ClientOptions) Log() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}
