// hello: a member joins the group "hello" through consortd, casts, and
// hears its cast come back (the README's Go example).
//
//	go run ./examples/hello /run/consort/consortd.sock
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	consort "consort/client"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: hello SOCKET")
		os.Exit(2)
	}
	if err := hello(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
}

func hello(sock string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := consort.Dial(ctx, sock, consort.Config{Name: "hello.go"})
	if err != nil {
		return err
	}
	defer c.Close()
	m, err := c.Join(ctx, "hello", consort.JoinOptions{Props: "vsync,Total"})
	if err != nil {
		return err
	}
	if _, err := m.CastWait(ctx, []byte("hello")); err != nil {
		return err // a refusal: errors.Is(err, consort.FlowControl), ...
	}
	for {
		ev, err := c.Next(ctx)
		if err != nil {
			return err
		}
		if d, ok := ev.(*consort.Cast); ok {
			fmt.Printf("%s: %s\n", d.Origin, d.Payload)
			break
		}
	}
	return m.Leave(ctx)
}
