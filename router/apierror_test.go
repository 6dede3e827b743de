package router

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestAPIErrorWriteTo(t *testing.T) {
	cases := []struct {
		err        *APIError
		wantStatus int
		wantBody   string
	}{
		{badRequest("messages[2].content", "bad %s", "thing"), 400,
			`{"error":{"message":"bad thing","type":"invalid_request_error","param":"messages[2].content","code":null}}`},
		{ErrModelNotFound("gpt-x"), 404,
			`{"error":{"message":"The model \"gpt-x\" does not exist or no backend serves it.","type":"invalid_request_error","param":"model","code":"model_not_found"}}`},
		{ErrBodyTooLarge(1024), 413,
			`{"error":{"message":"Request body exceeds the limit of 1024 bytes.","type":"request_too_large","param":null,"code":null}}`},
		{NewAPIError(503, "", "no backend for <%s>", "m"), 503,
			`{"error":{"message":"no backend for \u003cm\u003e","type":"service_unavailable","param":null,"code":null}}`},
		{&APIError{Status: 0, Type: TypeServer, Message: "x"}, 500,
			`{"error":{"message":"x","type":"server_error","param":null,"code":null}}`},
	}
	for _, c := range cases {
		rec := httptest.NewRecorder()
		rec.Header().Set("Content-Encoding", "gzip")
		c.err.WriteTo(rec)
		if rec.Code != c.wantStatus {
			t.Errorf("%v: status %d, want %d", c.err, rec.Code, c.wantStatus)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		if rec.Header().Get("Content-Encoding") != "" {
			t.Error("stale Content-Encoding kept")
		}
		if got := rec.Body.String(); got != c.wantBody {
			t.Errorf("body\n got %s\nwant %s", got, c.wantBody)
		}
		var decoded struct {
			Error struct{ Message, Type string }
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &decoded); err != nil || decoded.Error.Type != c.err.Type {
			t.Errorf("body does not decode as an OpenAI error: %v %+v", err, decoded)
		}
	}
}

func TestAPIErrorError(t *testing.T) {
	e := badRequest("model", "missing")
	if got := e.Error(); got != "400 invalid_request_error: model: missing" {
		t.Fatalf("Error() = %q", got)
	}
	if got := (&APIError{Status: 404, Type: TypeNotFound, Message: "nope"}).Error(); got != "404 not_found_error: nope" {
		t.Fatalf("Error() = %q", got)
	}
	b, err := json.Marshal(e)
	if err != nil || !strings.HasPrefix(string(b), `{"error":{"message":"missing"`) {
		t.Fatalf("MarshalJSON = %s, %v", b, err)
	}
}

func TestTypeForStatus(t *testing.T) {
	want := map[int]string{400: TypeInvalidRequest, 401: TypeAuthentication, 403: TypePermission, 404: TypeNotFound,
		405: TypeInvalidRequest, 413: TypeTooLarge, 418: TypeInvalidRequest, 422: TypeInvalidRequest, 429: TypeRateLimit,
		500: TypeServer, 502: TypeServer, 503: TypeUnavailable, 504: TypeTimeout}
	for status, typ := range want {
		if got := TypeForStatus(status); got != typ {
			t.Errorf("TypeForStatus(%d) = %q, want %q", status, got, typ)
		}
	}
}
