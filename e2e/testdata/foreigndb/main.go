// Command foreigndb makes bad inputs for the end-to-end tests:
//
//	foreigndb PATH          a valid bbolt file that is not a forensic run
//	foreigndb -newer PATH   bumps the schema version of a run.db in place
package main

import (
	"encoding/binary"
	"log"
	"os"

	bolt "go.etcd.io/bbolt"
)

func main() {
	newer := len(os.Args) == 3 && os.Args[1] == "-newer"
	path := os.Args[len(os.Args)-1]
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		if newer {
			meta := tx.Bucket([]byte("meta"))
			v := binary.BigEndian.Uint32(meta.Get([]byte("schema")))
			return meta.Put([]byte("schema"), binary.BigEndian.AppendUint32(nil, v+1))
		}
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
