// Package router is kvmesh's OpenAI-compatible, cache-aware HTTP proxy. It
// owns request rendering (canonical prompt units and message boundaries),
// the backend set (health, load signals from in-flight counts, ORCA headers
// and scraped Prometheus metrics), the selection policies behind one Policy
// interface, the reverse proxy itself (streaming, retries before the first
// byte), the debug and explanation surfaces, and its metrics. It also owns
// the cache belief: what each backend's cache still holds of what it was
// sent, learned from the answers' cached_tokens (belief.go, the capacity
// and edge; doubtworth.go, what a claim past the edge is worth;
// belief_route.go, the learning; lesson.go, what the mesh's nodes share of
// it), and each backend's queue of this node's requests waiting for a
// first byte (backend.go's pending prefill; overdue.go, the order they
// were sent in and the rate they are computed at). The kvmesh policy's
// cost model is policy_kvmesh.go (its weights, and the model written out,
// on KVMeshConfig in policy_kvmesh_config.go); waitguard.go is its optional
// guard for a request's own first token, blocking.go its optional price of
// the wait a long prefill imposes on the requests bound to a backend.
//
// router reads claims from a tree.Index and writes what it learns through a
// small Learner interface that the mesh (or a local, unreplicated learner)
// satisfies. It may import tree and its subpackage kvevents (precise
// mode's event decoding; kubediscovery imports router, not the reverse). It
// must not import mesh, crdt, transport or cmd; of Kubernetes' libraries
// only apimachinery's label and name validation (discovery config checks),
// never client-go, which stays in kubediscovery.
package router
