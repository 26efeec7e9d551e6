package service

import "go.uber.org/zap"

// Log fields: ids only, never a secret.
func zapKeyID(id string) zap.Field { return zap.String("key_id", id) }
func zapErr(err error) zap.Field   { return zap.Error(err) }

func zapFamily(id string) zap.Field { return zap.String("token_family", id) }
