-- CreateTable
CREATE TABLE "Replay" (
    "id" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "selection" TEXT NOT NULL,
    "alternative" TEXT NOT NULL,
    "turnIds" TEXT NOT NULL,
    "turnCount" INTEGER NOT NULL,
    "reportHash" TEXT,
    "error" TEXT,
    "requestedBy" TEXT,
    "workflowId" TEXT,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "finishedAt" TIMESTAMP(3),

    CONSTRAINT "Replay_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "Replay_createdAt_idx" ON "Replay"("createdAt");
