package main

// A client of sandboxd's JSON-RPC 2.0 API (docs/API.md): one Unix socket
// connection, one JSON message per line, requests in flight at once,
// answers matched by id, command.output/command.exit notifications handed
// to the process that owns the cmdId.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
)

// defaultSocket is sandboxd's default socket (docs/API.md); SANDBOXD_SOCKET
// in containerd's environment (the shim inherits it) overrides it.
const defaultSocket = "/run/sandboxd/sandboxd.sock"

func socketPath() string {
	if p := os.Getenv("SANDBOXD_SOCKET"); p != "" {
		return p
	}
	return defaultSocket
}

// rpcError is an error answer of sandboxd: code, message and data.field /
// data.reason when present.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    struct {
		Field  string `json:"field"`
		Reason string `json:"reason"`
	} `json:"data"`
}

func (e *rpcError) Error() string {
	if e.Data.Field != "" && !startsWith(e.Message, e.Data.Field) {
		return e.Data.Field + ": " + e.Message
	}
	return e.Message
}

func startsWith(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// isReason says whether err is a sandboxd error with data.reason r.
func isReason(err error, r string) bool {
	var re *rpcError
	return errors.As(err, &re) && re.Data.Reason == r
}

type rpcMsg struct {
	ID     *json.RawMessage `json:"id"`
	Method string           `json:"method"`
	Params json.RawMessage  `json:"params"`
	Result json.RawMessage  `json:"result"`
	Error  *rpcError        `json:"error"`
}

// notifyFunc receives a notification's method and params; it runs on the
// reader goroutine, in arrival order (blocking it is how the daemon's flow
// control reaches the FIFO readers, docs/API.md "Framing").
type notifyFunc func(method string, params json.RawMessage)

type rpcClient struct {
	conn    net.Conn
	wmu     sync.Mutex
	mu      sync.Mutex
	next    int64
	pending map[int64]chan rpcMsg
	closed  error
	notify  notifyFunc
	done    chan struct{}
}

// dialRPC connects to sandboxd's socket; notify gets every notification.
func dialRPC(path string, notify notifyFunc) (*rpcClient, error) {
	conn, err := net.Dial("unix", path)
	if err != nil {
		return nil, fmt.Errorf("sandboxd socket %s: %w (is sandboxd running? SANDBOXD_SOCKET names another socket)", path, err)
	}
	c := &rpcClient{conn: conn, pending: map[int64]chan rpcMsg{}, notify: notify, done: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

func (c *rpcClient) readLoop() {
	r := bufio.NewReaderSize(c.conn, 1<<20)
	var err error
	for {
		var line []byte
		line, err = r.ReadBytes('\n')
		if err != nil {
			break
		}
		var m rpcMsg
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		if m.ID == nil || string(*m.ID) == "null" {
			if m.Method != "" && c.notify != nil {
				c.notify(m.Method, m.Params)
			}
			continue
		}
		var id int64
		if json.Unmarshal(*m.ID, &id) != nil {
			continue
		}
		c.mu.Lock()
		ch := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
	c.mu.Lock()
	c.closed = fmt.Errorf("connection to sandboxd lost: %v", err)
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	c.mu.Unlock()
	close(c.done)
}

// call sends method(params) and waits for its answer, decoded into out
// (when not nil). An error answer is returned as *rpcError.
func (c *rpcClient) call(method string, params interface{}, out interface{}) error {
	c.mu.Lock()
	if c.closed != nil {
		c.mu.Unlock()
		return c.closed
	}
	c.next++
	id := c.next
	ch := make(chan rpcMsg, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	if params == nil {
		params = map[string]interface{}{}
	}
	req, err := json.Marshal(map[string]interface{}{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		return err
	}
	req = append(req, '\n')
	c.wmu.Lock()
	_, err = c.conn.Write(req)
	c.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: writing to sandboxd: %w", method, err)
	}
	m, ok := <-ch
	if !ok {
		c.mu.Lock()
		defer c.mu.Unlock()
		return fmt.Errorf("%s: %v", method, c.closed)
	}
	if m.Error != nil {
		return m.Error
	}
	if out != nil {
		return json.Unmarshal(m.Result, out)
	}
	return nil
}

func (c *rpcClient) close() { c.conn.Close() }
