package main

import (
	"context"
	"errors"
	"io"
)

func rawProxyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("rawproxy: being written")
}
