package logship

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/protocol"
)

// TestPutErrorCarriesNoGrant: an upload that gets no answer, or whose grant
// URL does not parse, fails without the grant's URL (its signature) in the
// error, which may one day be logged (docs/operations.md, "Logs").
func TestPutErrorCarriesNoGrant(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: the PUT gets no answer
	const secret = "X-Amz-Signature=deadbeefcafe"
	for _, tc := range []struct{ name, url string }{
		{"no answer", "http://" + addr + "/logs/chunk?" + secret},
		{"unparsable", "http://[::1%zz/logs/chunk?" + secret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Shipper{cfg: Config{HTTP: &http.Client{}}}
			err := s.put(context.Background(), &protocol.LogUpload{Method: "PUT", URL: tc.url}, []byte("x"))
			if err == nil {
				t.Fatal("put succeeded")
			}
			if strings.Contains(err.Error(), "deadbeefcafe") {
				t.Errorf("error carries the grant: %v", err)
			}
		})
	}
}
