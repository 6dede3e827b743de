package router

import (
	"github.com/valyala/fastjson"
)

// responses renders a /v1/responses request: the preamble segment, the
// instructions as a leading system message, then the input (a string is one
// user message; an array holds items, each rendered as one message).
//
// Items render like their chat equivalents, so the same conversation sent to
// either API shares its bytes message by message: a message item like a chat
// message, a function_call item like an assistant message holding one tool
// call, a function_call_output item like a tool message. Items of other
// types (reasoning, item_reference, ...) render as RS US 'y' type GS 'x'
// hash-of-canonical-item.
//
// A request continuing stored state (previous_response_id, conversation)
// has them in its preamble: the engine prefills that state before the
// input, so it must not render like a fresh request with the same input.
func (r *renderer) responses(obj *fastjson.Object) error {
	p := r.p
	input := obj.Get("input")
	if isAbsent(input) {
		return badRequest("input", "missing required parameter: input")
	}
	var t fastjson.Type
	var raw []byte
	t, raw, r.tmp = peek(input, r.tmp)
	if t != fastjson.TypeString && t != fastjson.TypeArray {
		return badRequest("input", "input must be a string or an array of input items")
	}
	if t == fastjson.TypeArray {
		if a, _ := input.Array(); len(a) == 0 {
			return badRequest("input", "input must not be empty")
		}
	}
	if err := r.preamble(obj); err != nil {
		return err
	}
	var it fastjson.Type
	var iraw []byte
	it, iraw, r.tmp2 = peek(obj.Get("instructions"), r.tmp2)
	switch it {
	case fastjson.TypeNull:
	case fastjson.TypeString:
		if len(iraw) > 0 {
			p.Units = append(p.Units, markMsg)
			p.Units = append(p.Units, "system"...)
			r.textRaw('t', iraw)
			p.Ends = append(p.Ends, len(p.Units))
		}
	default:
		return badRequest("instructions", "instructions must be a string")
	}
	if t == fastjson.TypeString {
		p.Units = append(p.Units, markMsg)
		p.Units = append(p.Units, "user"...)
		r.textRaw('t', raw)
		p.Ends = append(p.Ends, len(p.Units))
		return nil
	}
	items, _ := input.Array()
	for i, it := range items {
		if err := r.responsesItem(it, loc{list: "input", i: i, j: -1}); err != nil {
			return err
		}
		p.Ends = append(p.Ends, len(p.Units))
	}
	return nil
}

func (r *renderer) responsesItem(v *fastjson.Value, at loc) error {
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
	p := r.p
	switch string(typ) {
	case "", "message":
		return r.chatMessage(v, at)
	case "function_call":
		p.Units = append(p.Units, markMsg)
		p.Units = append(p.Units, "assistant"...)
		return r.call(o.Get("call_id"), o.Get("name"), o.Get("arguments"), at)
	case "function_call_output":
		p.Units = append(p.Units, markMsg)
		p.Units = append(p.Units, "tool"...)
		if err := r.optField(o, "call_id", 'i', at); err != nil {
			return err
		}
		return r.content(o.Get("output"), at.in("output", -1))
	}
	p.Units = append(p.Units, markMsg, markField, 'y')
	p.Units = appendEsc(p.Units, typ)
	return r.hashPart(v, 'x')
}
