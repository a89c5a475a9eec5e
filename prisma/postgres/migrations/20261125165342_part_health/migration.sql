-- CreateTable
CREATE TABLE "PartHealth" (
    "part" TEXT NOT NULL,
    "state" TEXT NOT NULL,
    "detail" TEXT NOT NULL,
    "since" TIMESTAMP(3) NOT NULL,
    "lastOkAt" TIMESTAMP(3),
    "checkedAt" TIMESTAMP(3) NOT NULL,
    "notifiedAt" TIMESTAMP(3),

    CONSTRAINT "PartHealth_pkey" PRIMARY KEY ("part")
);
