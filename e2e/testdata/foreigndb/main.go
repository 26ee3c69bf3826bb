// Command foreigndb writes a valid bbolt file that is not a forensic run,
// for the bad-input tests.
package main

import (
	"log"
	"os"

	bolt "go.etcd.io/bbolt"
)

func main() {
	db, err := bolt.Open(os.Args[1], 0o600, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("widgets"))
		if err != nil {
			return err
		}
		return b.Put([]byte("sprocket"), []byte("42"))
	})
	if err != nil {
		log.Fatal(err)
	}
}
