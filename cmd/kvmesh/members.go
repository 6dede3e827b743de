package main

import (
	"fmt"
	"io"
)

func membersCommand(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "kvmesh members: not wired yet")
	return 1
}
