// Package ports picks loopback ports for processes the tests and benches
// start, which need a port number in their flags or configuration before
// they listen.
//
// A port taken with a listen on 127.0.0.1:0 and closed again comes from
// the kernel's ephemeral range, the same range every outgoing connection
// on the machine draws its local port from: between the close and the
// process's own listen (or its restart on the same port), another test's
// connection may hold it, and the process fails to bind. Ports from here
// lie below that range, where no connection is given one unasked.
//
// It must not import anything of kvmesh's.
package ports
