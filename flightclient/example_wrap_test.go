package flightclient_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"slices"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle/flightclient"
)

// A program with a Flight client of its own (its dial options, its
// middleware) wraps it to speak the sidecar's protocol, and reaches the
// calls the package does not wrap through Flight: here ListActions.
func ExampleWrap() {
	ctx := context.Background()
	fc, err := flight.NewClientWithMiddleware(sidecarAddr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer fc.Close()
	c := flightclient.Wrap(fc, sidecarToken)

	// A call made through Flight carries what ctx carries: the bearer
	// token is the caller's to add.
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+sidecarToken)
	stream, err := c.Flight().ListActions(authed, &flight.Empty{})
	if err != nil {
		log.Fatal(err)
	}
	var actions []string
	for {
		a, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		actions = append(actions, a.Type)
	}
	fmt.Println("seal-stage offered:", slices.Contains(actions, flightclient.ActionSealStage))

	// The typed calls send the token given to Wrap: a stage never
	// written is NotFound, not Unauthenticated.
	_, err = c.Describe(ctx, "q-never-written", 0)
	fmt.Println("describe:", status.Code(err))
	// Output:
	// seal-stage offered: true
	// describe: NotFound
}
