//go:build cgo

package main

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzParseOptions: whatever options_json a C caller passes, parseOptions
// gives options or an error, never a panic; accepted options survive a
// JSON round trip unchanged (no key is silently dropped).
func FuzzParseOptions(f *testing.F) {
	f.Add([]byte(`{"workers":2,"prefetch":4,"cache_bytes":1048576,"max_memory":-1,"strict":true}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(``))
	f.Add([]byte(`{"workers":1,"bogus":1}`))
	f.Add([]byte(`{"workers":1} {}`))
	f.Add([]byte(`{"remote":{"addr":"127.0.0.1:8815","token":"t","tls":true,"tls_roots":"pem","retries":0,"backoff":0.1,"max_backoff":5,"timeout":60}}`))
	f.Add([]byte(`{"remote":{"addr":"h:1"},"workers":2}`))
	f.Add([]byte(`{"remote":{"addr":"h:1","timeout":-1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := parseOptions(b)
		if err != nil {
			return
		}
		again, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		o2, err := parseOptions(again)
		// DeepEqual: options hold pointers (remote, retries).
		if err != nil || !reflect.DeepEqual(o2, o) {
			t.Fatalf("options %+v do not round-trip: %+v, %v", o, o2, err)
		}
	})
}
