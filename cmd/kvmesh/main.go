// Command kvmesh is the kvmesh router node.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "kvmesh: not yet implemented")
	os.Exit(2)
}
