package scm

import (
	"log/slog"
	"net/http"
	"testing"
	"time"
)

func TestClientOptionsDefaults(t *testing.T) {
	var o ClientOptions
	hc := o.Client()
	if hc == nil || hc.Timeout != DefaultTimeout {
		t.Errorf("default client = %+v", hc)
	}
	if o.Client() == hc {
		t.Error("the default client is shared between drivers")
	}
	if l := o.Log(); l == nil || l.Enabled(t.Context(), slog.LevelError) {
		t.Error("the default logger should discard")
	}
	mine := &http.Client{Timeout: time.Second}
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	o = ClientOptions{HTTPClient: mine, Logger: log}
	if o.Client() != mine || o.Log() != log {
		t.Error("set options were not used")
	}
}
