package router

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// Error types, spelled as OpenAI spells them in the "type" field of an error
// body. Clients (the openai SDKs among them) branch on these strings, so they
// must not be reworded.
const (
	TypeInvalidRequest = "invalid_request_error" // 400: the request is malformed
	TypeAuthentication = "authentication_error"  // 401
	TypePermission     = "permission_error"      // 403
	TypeNotFound       = "not_found_error"       // 404: unknown model or path
	TypeTooLarge       = "request_too_large"     // 413: body over the configured limit
	TypeRateLimit      = "rate_limit_error"      // 429: every backend is saturated
	TypeServer         = "server_error"          // 500, 502: our fault or the backend's
	TypeUnavailable    = "service_unavailable"   // 503: no healthy backend
	TypeTimeout        = "timeout_error"         // 504: the backend did not answer in time
)

// APIError is an OpenAI-style error: {"error":{"message":...,"type":...,"param":...,"code":...}}.
//
// Param and Code are written as JSON null when empty, as OpenAI does.
type APIError struct {
	Status  int    // HTTP status code
	Type    string // one of the Type* constants
	Message string // human-readable; says what was wrong and where
	Param   string // the offending request field, e.g. "messages[2].content"; "" if none
	Code    string // machine-readable detail, e.g. "model_not_found"; "" if none
}

// Error implements error: "400 invalid_request_error: messages[2].content: must be a string or an array".
func (e *APIError) Error() string {
	s := strconv.Itoa(e.Status) + " " + e.Type + ": "
	if e.Param != "" {
		s += e.Param + ": "
	}
	return s + e.Message
}

// WriteTo writes e as the whole HTTP response: it sets Content-Type and the
// status code, then writes the JSON body. Call it before anything else has
// been written to w.
func (e *APIError) WriteTo(w http.ResponseWriter) {
	body := e.appendJSON(nil)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Del("Content-Encoding") // a partially copied backend header must not lie about our body
	status := e.Status
	if status < 100 || status > 999 {
		status = http.StatusInternalServerError
	}
	w.WriteHeader(status)
	_, _ = w.Write(body) // the client went away: nothing left to tell it
}

// MarshalJSON renders the OpenAI error envelope.
func (e *APIError) MarshalJSON() ([]byte, error) { return e.appendJSON(nil), nil }

type apiErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *APIError) appendJSON(dst []byte) []byte {
	var body struct {
		Error apiErrorBody `json:"error"`
	}
	body.Error = apiErrorBody{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		body.Error.Param = &e.Param
	}
	if e.Code != "" {
		body.Error.Code = &e.Code
	}
	b, err := json.Marshal(&body)
	if err != nil { // strings always marshal; keep a valid body regardless
		return append(dst, `{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}`...)
	}
	return append(dst, b...)
}

// TypeForStatus returns the OpenAI error type conventionally used with an
// HTTP status code.
func TypeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusMethodNotAllowed, http.StatusUnsupportedMediaType:
		return TypeInvalidRequest
	case http.StatusUnauthorized:
		return TypeAuthentication
	case http.StatusForbidden:
		return TypePermission
	case http.StatusNotFound:
		return TypeNotFound
	case http.StatusRequestEntityTooLarge:
		return TypeTooLarge
	case http.StatusTooManyRequests:
		return TypeRateLimit
	case http.StatusServiceUnavailable:
		return TypeUnavailable
	case http.StatusGatewayTimeout:
		return TypeTimeout
	}
	if status >= 400 && status < 500 {
		return TypeInvalidRequest
	}
	return TypeServer
}

// NewAPIError builds an error whose Type follows from status (see TypeForStatus).
func NewAPIError(status int, param, format string, args ...any) *APIError {
	return &APIError{Status: status, Type: TypeForStatus(status), Param: param, Message: fmt.Sprintf(format, args...)}
}

// badRequest is the 400 invalid_request_error that Render returns.
func badRequest(param, format string, args ...any) *APIError {
	return NewAPIError(http.StatusBadRequest, param, format, args...)
}

// ErrModelNotFound is the 404 for a model no backend serves.
func ErrModelNotFound(model string) *APIError {
	return &APIError{Status: http.StatusNotFound, Type: TypeInvalidRequest, Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("The model %q does not exist or no backend serves it.", model)}
}

// ErrBodyTooLarge is the 413 for a request body over limit bytes.
func ErrBodyTooLarge(limit int64) *APIError {
	return &APIError{Status: http.StatusRequestEntityTooLarge, Type: TypeTooLarge,
		Message: fmt.Sprintf("Request body exceeds the limit of %d bytes.", limit)}
}
