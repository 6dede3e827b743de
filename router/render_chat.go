package router

import (
	"strconv"

	"github.com/valyala/fastjson"
)

// loc names a place in the request for error messages ("messages[2].content[1].text").
// It is a value so that the happy path builds no strings.
type loc struct {
	list string // "messages" or "input"
	i    int    // index in list; -1 for the list itself
	sub  string // "content", "tool_calls", "output", ...
	j    int    // index in sub; -1 if none
}

func (l loc) param(field string) string {
	s := l.list
	if l.i >= 0 {
		s += "[" + strconv.Itoa(l.i) + "]"
	}
	if l.sub != "" {
		s += "." + l.sub
		if l.j >= 0 {
			s += "[" + strconv.Itoa(l.j) + "]"
		}
	}
	if field != "" {
		s += "." + field
	}
	return s
}

func (l loc) in(sub string, j int) loc { return loc{list: l.list, i: l.i, sub: sub, j: j} }

func (l loc) typeErr(field, want string) error {
	return badRequest(l.param(field), "%s must be %s", l.param(field), want)
}

// chat renders a chat request: the preamble segment, then every message.
func (r *renderer) chat(obj *fastjson.Object) error {
	msgs := obj.Get("messages")
	if isAbsent(msgs) {
		return badRequest("messages", "missing required parameter: messages")
	}
	if msgs.Type() != fastjson.TypeArray {
		return badRequest("messages", "messages must be an array")
	}
	arr, _ := msgs.Array()
	if len(arr) == 0 {
		return badRequest("messages", "messages must not be empty")
	}
	if err := r.preamble(obj); err != nil {
		return err
	}
	for i, m := range arr {
		if err := r.chatMessage(m, loc{list: "messages", i: i, j: -1}); err != nil {
			return err
		}
		r.p.Ends = append(r.p.Ends, len(r.p.Units))
	}
	return nil
}

// preambleKeys are the request fields other than the messages that change
// what a chat template renders (vLLM passes them all to the template), in
// canonical (sorted) order, with the JSON type each must have.
//
// For /v1/responses, also the stored state a request continues
// (previous_response_id, conversation): the engine prefills that state's
// whole conversation before the input, which the body does not carry, so
// the rendering must not equal a fresh request's with the same input.
var preambleKeys = [...]struct {
	key       string
	want      fastjson.Type
	responses bool // only read for EndpointResponses
}{
	{"chat_template", fastjson.TypeString, false},
	{"chat_template_kwargs", fastjson.TypeObject, false},
	{"conversation", fastjson.TypeString, true}, // or {"id": "..."}, rendered as the id
	{"documents", fastjson.TypeArray, false},
	{"functions", fastjson.TypeArray, false}, // deprecated form of tools
	{"previous_response_id", fastjson.TypeString, true},
	{"tools", fastjson.TypeArray, false},
}

// preamble renders the preamble segment, FS followed by the canonical JSON
// object of the preambleKeys present (empty values count as absent). Every
// turn of a conversation repeats them and templates put tool definitions
// first, so they lead the rendering with a boundary of their own.
func (r *renderer) preamble(obj *fastjson.Object) error {
	p := r.p
	n := 0
	for _, pk := range preambleKeys {
		if pk.responses && p.Endpoint != EndpointResponses {
			continue
		}
		v := obj.Get(pk.key)
		if isAbsent(v) {
			continue
		}
		if pk.key == "conversation" && v.Type() == fastjson.TypeObject {
			if v = v.Get("id"); v == nil || v.Type() != fastjson.TypeString {
				return badRequest("conversation.id", "conversation must be a string or an object with a string id")
			}
		}
		if v.Type() != pk.want {
			return badRequest(pk.key, "%s must be %s", pk.key, typeName(pk.want))
		}
		if isEmptyValue(v) {
			continue
		}
		if n == 0 {
			p.Units = append(p.Units, markPreamble, '{')
		} else {
			p.Units = append(p.Units, ',')
		}
		p.Units = append(p.Units, '"')
		p.Units = append(p.Units, pk.key...)
		p.Units = append(p.Units, '"', ':')
		p.Units = r.appendCanonical(p.Units, v)
		n++
	}
	if n > 0 {
		p.Units = append(p.Units, '}')
		p.Ends = append(p.Ends, len(p.Units))
		p.HasPreamble = true
	}
	return nil
}

func typeName(t fastjson.Type) string {
	switch t {
	case fastjson.TypeString:
		return "a string"
	case fastjson.TypeObject:
		return "an object"
	}
	return "an array"
}

// isEmptyValue: "", [] and {}.
func isEmptyValue(v *fastjson.Value) bool {
	switch v.Type() {
	case fastjson.TypeString:
		s, _ := v.StringBytes()
		return len(s) == 0
	case fastjson.TypeArray:
		a, _ := v.Array()
		return len(a) == 0
	case fastjson.TypeObject:
		o, _ := v.Object()
		return o.Len() == 0
	}
	return false
}

func (r *renderer) chatMessage(m *fastjson.Value, at loc) error {
	if m.Type() != fastjson.TypeObject {
		return badRequest(at.param(""), "%s must be an object", at.param(""))
	}
	o, _ := m.Object()
	if err := r.refuseDup(o, at); err != nil {
		return err
	}
	role, ok := optString(o.Get("role"))
	if !ok {
		return at.typeErr("role", "a string")
	}
	if len(role) == 0 {
		return badRequest(at.param("role"), "missing required parameter: %s", at.param("role"))
	}
	p := r.p
	p.Units = append(p.Units, markMsg)
	p.Units = appendEsc(p.Units, role)
	if err := r.optField(o, "name", 'n', at); err != nil {
		return err
	}
	if err := r.optField(o, "tool_call_id", 'i', at); err != nil {
		return err
	}
	if err := r.content(o.Get("content"), at.in("content", -1)); err != nil {
		return err
	}
	if v := o.Get("tool_calls"); !isAbsent(v) {
		if v.Type() != fastjson.TypeArray {
			return at.typeErr("tool_calls", "an array")
		}
		calls, _ := v.Array()
		for j, c := range calls {
			cat := at.in("tool_calls", j)
			if c.Type() != fastjson.TypeObject {
				return cat.typeErr("", "an object")
			}
			co, _ := c.Object()
			if err := r.refuseDup(co, cat); err != nil {
				return err
			}
			var name, args *fastjson.Value
			if fn := co.Get("function"); !isAbsent(fn) {
				if fn.Type() != fastjson.TypeObject {
					return cat.typeErr("function", "an object")
				}
				fo, _ := fn.Object()
				if err := r.refuseDupIn(fo, cat, "function"); err != nil {
					return err
				}
				name, args = fo.Get("name"), fo.Get("arguments")
			}
			if err := r.call(co.Get("id"), name, args, cat); err != nil {
				return err
			}
		}
	}
	if v := o.Get("function_call"); !isAbsent(v) { // deprecated single call
		if v.Type() != fastjson.TypeObject {
			return at.typeErr("function_call", "an object")
		}
		fo, _ := v.Object()
		if err := r.refuseDup(fo, at.in("function_call", -1)); err != nil {
			return err
		}
		return r.call(nil, fo.Get("name"), fo.Get("arguments"), at.in("function_call", -1))
	}
	return nil
}

// optField renders an optional string member as US tag value.
func (r *renderer) optField(o *fastjson.Object, key string, tag byte, at loc) error {
	s, ok := optString(o.Get(key))
	if !ok {
		return at.typeErr(key, "a string")
	}
	if len(s) > 0 {
		r.p.Units = append(r.p.Units, markField, tag)
		r.p.Units = appendEsc(r.p.Units, s)
	}
	return nil
}

// call renders one tool call: GS 'c' id US name US arguments. Arguments are
// normally a JSON-encoded string and are kept verbatim; an object (sent by
// some clients) is rendered as canonical JSON.
func (r *renderer) call(id, name, args *fastjson.Value, at loc) error {
	ids, ok := optString(id)
	if !ok {
		return at.typeErr("id", "a string")
	}
	names, ok := optString(name)
	if !ok {
		return at.typeErr("name", "a string")
	}
	p := r.p
	p.Units = append(p.Units, markPart, 'c')
	p.Units = appendEsc(p.Units, ids)
	p.Units = append(p.Units, markField)
	p.Units = appendEsc(p.Units, names)
	p.Units = append(p.Units, markField)
	var t fastjson.Type
	var raw []byte
	t, raw, r.tmp = peek(args, r.tmp)
	switch t {
	case fastjson.TypeNull:
	case fastjson.TypeString:
		p.Units = appendDecoded(p.Units, raw)
	case fastjson.TypeObject:
		r.scratch = r.appendCanonical(r.scratch[:0], args)
		p.Units = appendEsc(p.Units, r.scratch)
	default:
		return at.typeErr("arguments", "a string")
	}
	return nil
}

// content renders a message's content: a string, or an array of parts.
func (r *renderer) content(v *fastjson.Value, at loc) error {
	var t fastjson.Type
	var raw []byte
	t, raw, r.tmp = peek(v, r.tmp)
	switch t {
	case fastjson.TypeNull:
		return nil
	case fastjson.TypeString:
		r.textRaw('t', raw)
		return nil
	case fastjson.TypeArray:
		parts, _ := v.Array()
		for j, part := range parts {
			if err := r.part(part, at.in(at.sub, j)); err != nil {
				return err
			}
		}
		return nil
	}
	return at.typeErr("", "a string or an array of content parts")
}

// textRaw renders GS tag text from a raw JSON string body; empty text
// renders nothing (like absent content).
func (r *renderer) textRaw(tag byte, raw []byte) {
	if len(raw) == 0 {
		return
	}
	r.p.Units = append(r.p.Units, markPart, tag)
	r.p.Units = appendDecoded(r.p.Units, raw)
}

// part renders one content part of a chat message or a responses item.
func (r *renderer) part(v *fastjson.Value, at loc) error {
	if v.Type() != fastjson.TypeObject {
		return at.typeErr("", "an object")
	}
	o, _ := v.Object()
	if err := r.refuseDup(o, at); err != nil {
		return err
	}
	typ, ok := optString(o.Get("type"))
	if !ok {
		return at.typeErr("type", "a string")
	}
	if len(typ) == 0 { // some clients omit "type" on plain text or image parts
		switch {
		case o.Get("text") != nil:
			return r.textPart(o, "text", 't', at)
		case o.Get("image_url") != nil:
			return r.urlPart(o, "image_url", 'I', at)
		}
	}
	switch string(typ) {
	case "text", "input_text", "output_text":
		return r.textPart(o, "text", 't', at)
	case "refusal":
		return r.textPart(o, "refusal", 'r', at)
	case "image_url":
		return r.urlPart(o, "image_url", 'I', at)
	case "audio_url":
		return r.urlPart(o, "audio_url", 'U', at)
	case "video_url":
		return r.urlPart(o, "video_url", 'V', at)
	case "input_image":
		// Responses: {"image_url": "https://..." | data URI} or {"file_id": ...}.
		if u := o.Get("image_url"); !isAbsent(u) {
			return r.urlPart(o, "image_url", 'I', at)
		}
		return r.hashPart(v, 'I')
	case "input_audio":
		a := o.Get("input_audio")
		if isAbsent(a) || a.Type() != fastjson.TypeObject {
			return at.typeErr("input_audio", "an object")
		}
		return r.hashPart(a, 'A')
	case "file", "input_file":
		return r.hashPart(v, 'F')
	}
	// Unknown part type: hash the whole part so that equal parts still match.
	r.p.Units = append(r.p.Units, markPart, 'x')
	r.p.Units = appendEsc(r.p.Units, typ)
	r.p.Units = append(r.p.Units, markField)
	r.scratch = r.appendCanonical(r.scratch[:0], v)
	r.p.Units = appendHex(r.p.Units, hash64(r.scratch, 0))
	return nil
}

func (r *renderer) textPart(o *fastjson.Object, key string, tag byte, at loc) error {
	var t fastjson.Type
	var raw []byte
	t, raw, r.tmp = peek(o.Get(key), r.tmp)
	switch t {
	case fastjson.TypeNull:
		return nil
	case fastjson.TypeString:
		r.textRaw(tag, raw)
		return nil
	}
	return at.typeErr(key, "a string")
}

// urlPart renders a media part given by URL, either {"image_url": "..."} or
// {"image_url": {"url": "...", "detail": ...}}; only the URL is hashed.
func (r *renderer) urlPart(o *fastjson.Object, key string, tag byte, at loc) error {
	v := o.Get(key)
	if !isAbsent(v) && v.Type() == fastjson.TypeObject {
		vo, _ := v.Object()
		if err := r.refuseDupIn(vo, at, key); err != nil {
			return err
		}
		v = vo.Get("url")
		key += ".url"
	}
	if isAbsent(v) {
		return badRequest(at.param(key), "missing required parameter: %s", at.param(key))
	}
	u, ok := optString(v)
	if !ok {
		return at.typeErr(key, "a string")
	}
	r.p.Units = appendHash(r.p.Units, tag, hash64(u, uint64(tag)))
	return nil
}

// hashPart renders GS tag hash(canonical JSON of v).
func (r *renderer) hashPart(v *fastjson.Value, tag byte) error {
	r.scratch = r.appendCanonical(r.scratch[:0], v)
	r.p.Units = appendHash(r.p.Units, tag, hash64(r.scratch, uint64(tag)))
	return nil
}
