package router_test

import (
	"errors"
	"fmt"

	"github.com/kvmesh/kvmesh/router"
)

func ExampleRender() {
	body := []byte(`{"model": "llama", "stream": true, "messages": [
		{"role": "system", "content": "Be brief."},
		{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]}`)
	var p router.Prompt // reuse one Prompt per worker: Render keeps its buffers
	if err := router.Render(router.EndpointChat, body, &p); err != nil {
		panic(err)
	}
	fmt.Println(p.Model, p.Stream, p.Ends)
	fmt.Printf("%q\n", p.Units)

	// Malformed requests give an OpenAI-style 400 naming the field.
	err := router.Render(router.EndpointChat, []byte(`{"model":"llama","messages":[{"content":"x"}]}`), &p)
	var apiErr *router.APIError
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.Status, apiErr.Type, apiErr.Param)
	}
	// Output:
	// llama true [18 27]
	// "\x1esystem\x1dtBe brief.\x1euser\x1dtHi"
	// 400 invalid_request_error messages[0].role
}
